"""Words and dates in a table: TrainDesk at its defaults against scikit-learn's TF-IDF + logistic regression.

    .venv/bin/python bench/words.py [--rows 20000] [--test 5000] [--epochs 0] [--encoder-rows 1000] [--encoder-test 500]

The table (made here, seeded): a ``message`` of 5 to 30 words drawn from a Zipf vocabulary of 5,000 words,
where 60 words lean to one of two classes; a ``sent`` ISO timestamp whose hour leans to a class; an
``amount``; the class ``label`` from a logistic of all three. Each size is a training CSV of ROWS rows and a
test CSV of ``--test`` new rows, the same for every learner.

TrainDesk runs as a user runs it: ``python -m core train`` (only ``data.source`` and ``data.target`` set,
``--epochs`` to fix the epochs, 0: the defaults with early stopping), then ``python -m core predict RUN
test.csv``; the figures are those commands' wall time, start-up included. scikit-learn runs in this process:
``TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)`` + ``LogisticRegression(C=4)``, on the
text alone, and with the amount and the timestamp's hour, weekday and month one-hot beside it; its time is
the fit (vectorising included) and the prediction of the test rows. Also printed: the rows/s of TrainDesk's
n-gram step alone (``core.schema.text.text_slots``) against ``TfidfVectorizer.transform``.

The sentence-encoder path (``--encoder-rows``, 0: left out) builds a sentence-transformers model of a real
size here (nothing is downloaded): a BERT of 6 layers, hidden size 384, 12 heads (all-MiniLM-L6-v2's shape),
random weights, a WordPiece tokenizer trained on the bench's texts, mean pooling. On a table of that many rows
it prints the rows/s of the encoder's embedding (``core.schema.sentences.embed_texts``, every text new to the
cache) beside the n-gram step and ``TfidfVectorizer.transform`` on the same texts, then TrainDesk's accuracy
with the encoder frozen (``model.text_encoder``) and fine-tuned (``model.finetune = "full"``) beside TF-IDF +
LR's. Random weights: the frozen encoder's figure is a floor, not what a pretrained encoder gives.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_table(path: Path, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    freq = 1.0 / np.arange(1, 5001) ** 1.05
    freq /= freq.sum()
    lean = np.zeros(5000)
    signal = np.random.default_rng(12345).choice(np.arange(20, 400), 60, replace=False)  # the same in every file
    lean[signal[:30]], lean[signal[30:]] = 1.0, -1.0
    labels = []
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["amount", "message", "sent", "label"])
        for _ in range(n):
            ids = rng.choice(5000, int(rng.integers(5, 31)), p=freq)
            hour = int(rng.integers(24))
            amount = float(rng.normal(50, 20))
            score = lean[ids].sum() * 1.5 + (1.2 if 9 <= hour < 17 else -0.6) + 0.02 * (amount - 50)
            label = int(rng.random() < 1 / (1 + np.exp(-score)))
            sent = f"2024-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}T{hour:02d}:{rng.integers(60):02d}:00"
            w.writerow([f"{amount:.2f}", " ".join(vocab[i] for i in ids), sent, "yes" if label else "no"])
            labels.append(label)
    return labels


def read(path: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return (
        [r["message"] for r in rows],
        np.array([float(r["amount"]) for r in rows]),
        [r["sent"] for r in rows],
        np.array([r["label"] == "yes" for r in rows]),
    )


def sklearn_figures(train: Path, test: Path) -> dict[str, float]:
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    texts, amount, sent, y = read(train)
    t_texts, t_amount, t_sent, t_y = read(test)

    def parts(stamps: list[str]) -> np.ndarray:
        return np.array([[int(s[11:13]), int(s[5:7])] for s in stamps])

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x = tfidf.fit_transform(texts)
    clf = LogisticRegression(C=4, max_iter=2000).fit(x, y)
    out["text_fit_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = clf.predict(tfidf.transform(t_texts))
    out["text_predict_s"] = time.perf_counter() - t0
    out["text_accuracy"] = float((pred == t_y).mean())

    t0 = time.perf_counter()
    hot = OneHotEncoder(handle_unknown="ignore").fit(parts(sent))
    scale = StandardScaler().fit(amount[:, None])
    x_all = hstack([x, hot.transform(parts(sent)), csr_matrix(scale.transform(amount[:, None]))]).tocsr()
    clf_all = LogisticRegression(C=4, max_iter=2000).fit(x_all, y)
    out["all_fit_s"] = time.perf_counter() - t0 + out["text_fit_s"]
    t0 = time.perf_counter()
    t_x = hstack(
        [tfidf.transform(t_texts), hot.transform(parts(t_sent)), csr_matrix(scale.transform(t_amount[:, None]))]
    )
    pred = clf_all.predict(t_x.tocsr())
    out["all_predict_s"] = time.perf_counter() - t0
    out["all_accuracy"] = float((pred == t_y).mean())

    from core.schema.text import fit_slots, text_slots

    t0 = time.perf_counter()
    slots = fit_slots(np.asarray(texts, dtype=object))
    text_slots(np.asarray(texts, dtype=object), *slots)
    out["ngram_rows_per_s"] = len(texts) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    tfidf.transform(texts)
    out["tfidf_rows_per_s"] = len(texts) / (time.perf_counter() - t0)
    out["slots"] = float(sum(slots))
    return out


def traindesk_figures(
    train: Path, test: Path, epochs: int, work: Path, model: list[str] | None = None, env: dict[str, str] | None = None
) -> dict[str, float]:
    config = work / "run.toml"
    lines = ["[data]", f'source = "csv:{train}"', 'target = "label"']
    if epochs:
        lines += ["[train]", f"epochs = {epochs}", "early_stop_patience = 0"]
    if model:
        lines += ["[model]", *model]
    config.write_text("\n".join(lines) + "\n")
    runs = work / "runs"
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "core", "train", str(config), "--runs-dir", str(runs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    train_s = time.perf_counter() - t0
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    out_csv = work / "predicted.csv"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "core", "predict", str(run_dir), str(test), "--out", str(out_csv)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        env=env,
    )
    predict_s = time.perf_counter() - t0
    with out_csv.open() as fh:
        got = np.array([r["predicted"] == "yes" for r in csv.DictReader(fh)])
    y = read(test)[3]
    return {
        "train_s": train_s,
        "predict_s": predict_s,
        "accuracy": float((got == y).mean()),
        "epochs": float(summary.get("epochs_done") or summary.get("epoch") or 0),
    }


def build_encoder(folder: Path, texts: list[str]) -> Path:
    """A sentence-transformers model of all-MiniLM-L6-v2's shape, random weights, its tokenizer trained on
    ``texts``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers import models as token_models
    from transformers import BertConfig, BertModel, BertTokenizer

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(token_models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=8000, special_tokens=specials))
    bert = folder / "bert"
    BertTokenizer(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    ).save_pretrained(bert)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(bert)
    st = SentenceTransformer(
        modules=[modules.Transformer(str(bert), max_seq_length=256), modules.Pooling(384)], device="cpu"
    )
    st.save(str(folder / "encoder"))
    return folder / "encoder"


def encoder_figures(n: int, n_test: int, epochs: int) -> None:
    """The sentence-encoder path on ``n`` rows: embedding rows/s beside the n-gram step and TF-IDF, and the
    accuracy of the encoder frozen and fine-tuned."""
    import os

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, test = work / "train.csv", work / "test.csv"
        make_table(train, n, seed=0)
        make_table(test, n_test, seed=1)
        texts = read(train)[0]
        encoder = build_encoder(work, texts)
        os.environ["XDG_CACHE_HOME"] = str(work / "cache-bench")  # every text new to the cache
        from core.schema import sentences
        from core.schema.text import fit_slots, text_slots

        fingerprint, dim = sentences.describe(str(encoder))
        distinct = sorted(set(texts))
        t0 = time.perf_counter()
        sentences.embed_texts(str(encoder), fingerprint, distinct)
        encoder_rate = len(distinct) / (time.perf_counter() - t0)
        column = np.asarray(texts, dtype=object)
        t0 = time.perf_counter()
        text_slots(column, *fit_slots(column))
        ngram_rate = len(texts) / (time.perf_counter() - t0)
        sk = sklearn_figures(train, test)
        print(
            f"{n:>8} sentence encoder (6 layers, hidden {dim}, {torch.get_num_threads()} threads): "
            f"{encoder_rate:,.0f} texts/s; n-gram step {ngram_rate:,.0f} rows/s; TfidfVectorizer.transform "
            f"{sk['tfidf_rows_per_s']:,.0f} rows/s",
            flush=True,
        )
        rows = [("TF-IDF 1-2-grams + LR, text only", sk["text_fit_s"], sk["text_predict_s"], sk["text_accuracy"])]
        rows.append(("TF-IDF + amount + hour/month + LR", sk["all_fit_s"], sk["all_predict_s"], sk["all_accuracy"]))
        for name, finetune in (("encoder frozen", "head"), ("encoder fine-tuned", "full")):
            env = {**os.environ, "XDG_CACHE_HOME": str(work / f"cache-{finetune}")}  # each run embeds its texts
            model = [f'text_encoder = "{encoder}"', f'finetune = "{finetune}"']
            (work / finetune).mkdir()
            td = traindesk_figures(train, test, epochs, work / finetune, model, env)
            rows.append(
                (f"TrainDesk, {name} ({td['epochs']:.0f} epochs)", td["train_s"], td["predict_s"], td["accuracy"])
            )
        for name, fit_s, pred_s, acc in rows:
            print(f"{n:>8} {name:<44} {fit_s:>8.1f} {n / fit_s:>11,.0f} {n_test / pred_s:>15,.0f} {acc:>9.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="20000")
    ap.add_argument("--test", type=int, default=5000)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--encoder-rows", type=int, default=1000, help="the sentence encoder's table; 0: left out")
    ap.add_argument("--encoder-test", type=int, default=500)
    args = ap.parse_args()
    print(f"{'rows':>8} {'learner':<44} {'fit s':>8} {'fit rows/s':>11} {'predict rows/s':>15} {'accuracy':>9}")
    if args.encoder_rows:
        encoder_figures(args.encoder_rows, args.encoder_test, args.epochs)
    for n in (int(v) for v in args.rows.split(",") if v):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            train, test = work / "train.csv", work / "test.csv"
            make_table(train, n, seed=0)
            make_table(test, args.test, seed=1)
            sk = sklearn_figures(train, test)
            td = traindesk_figures(train, test, args.epochs, work)
            rows = [
                ("TF-IDF 1-2-grams + LR, text only", sk["text_fit_s"], sk["text_predict_s"], sk["text_accuracy"]),
                ("TF-IDF + amount + hour/month + LR", sk["all_fit_s"], sk["all_predict_s"], sk["all_accuracy"]),
                (
                    f"TrainDesk defaults ({td['epochs']:.0f} epochs, commands)",
                    td["train_s"],
                    td["predict_s"],
                    td["accuracy"],
                ),
            ]
            for name, fit_s, pred_s, acc in rows:
                print(f"{n:>8} {name:<44} {fit_s:>8.1f} {n / fit_s:>11,.0f} {args.test / pred_s:>15,.0f} {acc:>9.4f}")
            print(
                f"{n:>8} n-gram step alone: {sk['ngram_rows_per_s']:,.0f} rows/s ({sk['slots']:.0f} slots) against "
                f"TfidfVectorizer.transform {sk['tfidf_rows_per_s']:,.0f} rows/s "
                f"({sk['ngram_rows_per_s'] / sk['tfidf_rows_per_s']:.2f}x)"
            )
            print(
                f"{n:>8} TrainDesk against TF-IDF + all columns: accuracy {td['accuracy'] - sk['all_accuracy']:+.4f}, "
                f"fit time {td['train_s'] / sk['all_fit_s']:.2f}x, predict time {td['predict_s'] / sk['all_predict_s']:.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
