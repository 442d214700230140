"""What prediction gives: ``Predictions`` (classes and probabilities in input order) and its CSV text.

The CSV is ``id,predicted,prob_<class>...`` (a regression model's: ``id,<target>``), each
probability the shortest decimal that reads back as the same float32; rows are formatted by
pyarrow in C++, by the pool's processes when there are several.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from core.errors import UserError
from core.services.predict.inputs import RowNumbers

if TYPE_CHECKING:
    import numpy as np

_CSV_SPECIAL = (",", '"', "\r", "\n")


def _csv_field(text: str) -> str:
    """Quoted as the csv module does (QUOTE_MINIMAL) when it holds a comma, a quote or a line break."""
    if any(c in text for c in _CSV_SPECIAL):
        return '"' + text.replace('"', '""') + '"'
    return text


def _csv_fields(texts: Sequence[str]) -> Sequence[str]:
    joined = "\x00".join(texts)  # one scan for the common case: no id needs quoting
    if not any(c in joined for c in _CSV_SPECIAL):
        return texts
    return [_csv_field(t) for t in texts]


def csv_header(classes: Sequence[str]) -> str:
    if len(classes) == 1:  # regression: one predicted number per row, named after the target
        return f"id,{_csv_field(classes[0])}\n"
    return ",".join(["id", "predicted"] + [_csv_field(f"prob_{c}") for c in classes]) + "\n"


def format_rows(ids: Sequence[str], probs: np.ndarray, classes: Sequence[str]) -> str:
    """CSV lines ``id,predicted,prob_...`` for these rows, formatted by pyarrow in C++.

    Each probability is the shortest decimal that reads back as the same
    float32 (``0.61903375``, ``5.7675044e-7``): nothing is lost.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ids) == 0:
        return ""
    names = pa.array([_csv_field(c) for c in classes], pa.string())
    if isinstance(ids, RowNumbers):  # numbered in C++, not one Python string each
        id_column = pc.cast(pa.array(np.arange(ids.rows.start, ids.rows.stop, ids.rows.step)), pa.string())
    else:
        id_column = pa.array(_csv_fields(ids), pa.string())
    columns = [id_column, pc.take(names, pa.array(probs.argmax(axis=1)))] if len(classes) != 1 else [id_column]
    columns += [pc.cast(pa.array(np.ascontiguousarray(probs[:, j])), pa.string()) for j in range(probs.shape[1])]
    lines = pc.binary_join_element_wise(pc.binary_join_element_wise(*columns, ","), "\n", "")
    _, offsets, data = lines.buffers()  # one string array: its data buffer is the lines end to end
    bounds = np.frombuffer(offsets, np.int32)[lines.offset : lines.offset + len(lines) + 1]
    return memoryview(data)[bounds[0] : bounds[-1]].tobytes().decode("utf-8")


@dataclass
class Predictions:
    """Predicted classes and probabilities for every input row, in input order."""

    ids: Sequence[str]
    classes: list[str]
    probs: np.ndarray
    chunks: list[str]  # the CSV body, already formatted (by the workers when there are several)
    model_path: Path
    workers: int
    seconds: float
    labels: list[str] | None = None  # true classes of a labelled input (a test set)
    notes: tuple[str, ...] = ()  # what reading the input met (unseen category values)
    written: int | None = None  # rows written as they came (``CsvStream``): then none of them is kept here
    tally: Tally | None = None  # a labelled input's truth against the rows written as they came

    @property
    def n_rows(self) -> int:
        return len(self.ids) if self.written is None else self.written

    @property
    def predicted(self) -> list[str]:
        return [self.classes[k] for k in self.probs.argmax(axis=1).tolist()]

    def evaluation(self) -> dict[str, Any] | None:
        """The test set's scores against the true labels (``core.training.scores``, as a run's evaluation):
        accuracy, per-class precision/recall/F1, macro and weighted averages and the confusion matrix;
        a regression model's RMSE, MAE and R²."""
        from core.training.scores import label_scores, regression_report

        if self.written is not None:
            return None if self.tally is None else self.tally.evaluation()
        if self.labels is None:
            return None
        if len(self.classes) == 1:  # regression: the true values against the predicted ones
            return regression_report(self.probs[:, 0].astype(float).tolist(), [float(v) for v in self.labels])
        return label_scores(self.labels, self.predicted, self.classes)

    def csv_text(self) -> str:
        assert self.written is None, "the rows were written as they came"
        return csv_header(self.classes) + "".join(self.chunks)

    def write_csv(self, fh: IO[str]) -> None:
        assert self.written is None, "the rows were written as they came"
        fh.write(csv_header(self.classes))
        for chunk in self.chunks:
            fh.write(chunk)

    def save(self, path: Path) -> None:
        """Write the CSV atomically: a failed write leaves no partial file."""
        from core.runfiles.writing import atomic_write_bytes

        try:
            atomic_write_bytes(path, self.csv_text().encode("utf-8"))
        except OSError as exc:
            raise UserError(f"predict: cannot write {path}: {exc.strerror or exc}") from None


class Collected:
    """Prediction results kept in memory as they come, in input order (what a :class:`Predictions` holds)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Forget every result: the input is predicted again from its first row."""
        self.probs: list[np.ndarray] = []
        self.texts: list[str] = []
        self.ids: list[Sequence[str]] = []
        self.labels: list[list[str]] | None = []

    def add(self, probs: np.ndarray, text: str, ids: Sequence[str], labels: list[str] | None) -> None:
        """The next rows' probabilities, CSV lines, ids and true labels (None: these rows have none, and so
        the input as a whole has none)."""
        self.probs.append(probs)
        self.texts.append(text)
        self.ids.append(ids)
        if labels is None or self.labels is None:
            self.labels = None
        else:
            self.labels.append(labels)

    def all_ids(self) -> Sequence[str]:
        if all(isinstance(i, RowNumbers) for i in self.ids):  # numbered: one range, not a string per row
            return RowNumbers(range(sum(len(i) for i in self.ids)))
        return [v for part in self.ids for v in part]

    def all_labels(self) -> list[str] | None:
        return None if self.labels is None else [v for part in self.labels for v in part]


class Tally:
    """A labelled input's true labels against the predictions, for rows that are not kept: counts of
    (true, predicted) class pairs, or a regression's true and predicted values (two floats a row)."""

    def __init__(self, classes: Sequence[str]) -> None:
        self.classes = list(classes)
        self.restart()

    def restart(self) -> None:
        self.labelled = True  # every row so far came with its true label
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.values: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, probs: np.ndarray, labels: list[str] | None) -> None:
        import numpy as np

        if labels is None or not self.labelled:
            self.labelled = False
            return
        if len(self.classes) == 1:
            self.values.append((probs[:, 0].astype(np.float64), np.asarray([float(v) for v in labels])))
        else:
            names = self.classes
            self.pairs.update(zip(labels, (names[k] for k in probs.argmax(axis=1).tolist())))

    def evaluation(self) -> dict[str, Any] | None:
        """What :meth:`Predictions.evaluation` gives for the same rows kept."""
        import numpy as np

        from core.training.scores import pair_scores, regression_report

        if not self.labelled:
            return None
        if len(self.classes) == 1:
            pred = np.concatenate([p for p, _ in self.values]) if self.values else np.empty(0)
            true = np.concatenate([t for _, t in self.values]) if self.values else np.empty(0)
            return regression_report(pred.tolist(), true.tolist())
        return pair_scores(self.pairs, self.classes)


class CsvStream:
    """Prediction results written to ``fh`` as they come, after the CSV header (written with the first rows,
    or by ``finish``: an input that fails before its first rows writes nothing); only their count is kept.

    A restart (the input predicted again from its first row, read another way) empties a file that can
    be rewound; elsewhere (a pipe) the rows already written are skipped as they come again: they are the
    same rows, and whole batches (results start and end at batch boundaries).
    """

    def __init__(self, fh: IO[str], classes: Sequence[str]) -> None:
        self.fh = fh
        self.header = csv_header(classes)
        self.started = False
        self.rows = 0
        self._skip = 0
        self.tally = Tally(classes)

    def restart(self) -> None:
        if not self.started:
            self.tally.restart()
            return
        try:
            self.fh.seek(0)
            self.fh.truncate()
        except (OSError, ValueError):  # not seekable (io.UnsupportedOperation is both)
            self._skip = self.rows
            return
        self.started = False
        self.rows = 0
        self.tally.restart()

    def add(self, probs: np.ndarray, text: str, ids: Sequence[str], labels: list[str] | None) -> None:
        n = len(probs)
        if self._skip:
            if n > self._skip:
                raise RuntimeError("predict: the input's second read does not meet the first at a batch boundary")
            self._skip -= n
            return
        self.finish()
        self.fh.write(text)
        self.rows += n
        self.tally.add(probs, labels)

    def finish(self) -> None:
        """The header, if no rows wrote it."""
        if not self.started:
            self.fh.write(self.header)
            self.started = True
