"""A run's TensorBoard files, written from records and read back with TensorBoard's own reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from core.runfiles import records as R
from core.runfiles.figures import confusion_image, evaluation_image, predicted_vs_actual
from core.runfiles.tensorboard_log import TensorBoardLog, flatten, run_figures

T0 = 1_700_000_000.0


def read(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def markers(acc: EventAccumulator) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors("markers/text_summary")]


def hparams(acc: EventAccumulator) -> tuple[dict[str, object], list[str]]:
    """The session's hparams (name -> value) and the experiment's metric tags."""
    values: dict[str, object] = {}
    metrics: list[str] = []
    for raw in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(raw)
        if data.HasField("session_start_info"):
            for name, v in data.session_start_info.hparams.items():
                values[name] = getattr(v, v.WhichOneof("kind"))
        if data.HasField("experiment"):
            metrics = [m.name.tag for m in data.experiment.metric_infos]
    return values, metrics


def steps(worker: int, first: int, last: int, t: float = T0, per_s: float = 10.0) -> list[dict]:
    return [
        R.step_record(worker, 1, s, s * 10, 1.0 / s, 0.05, t=t + (s - first) / per_s) for s in range(first, last + 1)
    ]


def test_records_become_scalars_per_worker_markers_and_an_end(tmp_path: Path) -> None:
    tb = TensorBoardLog(tmp_path / "tb", [0, 0])
    tb.add([R.state_record(None, "running", t=T0), *steps(0, 1, 10), *steps(1, 1, 5)])
    tb.add([R.eval_record(0, 1, {"val_loss": 0.5, "val_accuracy": 0.75}, 100, t=T0 + 1)])
    tb.add([R.state_record(None, "paused", "asked", t=T0 + 2), R.state_record(None, "running", "resumed", t=T0 + 9)])
    tb.add([R.config_record({"optim.lr": {"from": 0.05, "to": 0.01}}, {"0": 10}, t=T0 + 9)])
    tb.add([R.recovery_record(1, 1, 5, 0.05, 0.005, float("nan"), 4, t=T0 + 9)])
    tb.add([R.log_record(None, "info", "not a marker", t=T0 + 9), R.log_record(1, "warning", "stalled", t=T0 + 9)])
    tb.add(steps(0, 11, 20, t=T0 + 10))
    summary = {
        "status": "finished",
        "final": {"train_loss": 0.1, "val_loss": 0.4, "val_accuracy": 0.8},
        "best": {"monitor": "val_accuracy", "value": 0.85, "worker": 0, "epoch": 1},
        "samples_per_s": 123.0,
        "stop_reason": "stopped early at epoch 3",
        "error": None,
    }
    evaluation = {"confusion": [[5, 1], [2, 7]], "per_class": [{"class": "cat"}, {"class": "dog"}]}
    config = {"optim": {"lr": 0.05, "name": "sgd"}, "model": {"hidden": [32, 16]}, "data": {"standardize": True}}
    tb.finish(config, summary, evaluation)

    acc = read(tmp_path / "tb")
    assert scalars(acc, "loss/worker0")[0] == (1, 1.0) and [s for s, _ in scalars(acc, "loss/worker0")] == list(
        range(1, 21)
    )
    assert [s for s, _ in scalars(acc, "lr/worker1")] == [1, 2, 3, 4, 5]
    assert scalars(acc, "val_loss/worker0") == [(10, 0.5)] and scalars(acc, "val_accuracy/worker0") == [(10, 0.75)]
    # worker 0: 10 samples a step, 10 steps a second, before the pause and after it (the pause left out)
    assert [round(v) for _, v in scalars(acc, "samples_per_s/worker0")] == [100, 100]
    assert [round(v) for _, v in scalars(acc, "samples_per_s/worker1")] == [100]
    texts = markers(acc)
    said = [text for _, text in texts]
    assert said[:3] == ["run running", "run paused: asked", "run running: resumed"]
    assert "live edit: optim.lr 0.05 → 0.01" in said
    assert any(t.startswith("worker 1 recovered from a nan loss after step 5") for t in said)
    assert "worker 1 warning: stalled" in said and not any("not a marker" in t for t in said)
    assert said[-2:] == ["stopped early at epoch 3", "run finished"]
    marker_steps = [s for s, _ in texts]
    assert marker_steps == sorted(set(marker_steps))  # one text a step, each after the last: none is dropped
    assert scalars(acc, "final/val_accuracy") == [(20, pytest.approx(0.8))]
    assert scalars(acc, "best/val_accuracy") == [(20, pytest.approx(0.85))]
    values, metrics = hparams(acc)
    assert values["optim.lr"] == pytest.approx(0.05) and values["optim.name"] == "sgd"
    assert values["model.hidden"] == "[32,16]" and values["data.standardize"] is True
    assert set(metrics) == set(run_figures(summary)) and "final/samples_per_s" in metrics
    [picture] = acc.Images("evaluation/confusion_matrix")
    assert picture.step == 20 and picture.encoded_image_string.startswith(b"\x89PNG")


def test_a_second_opening_appends_a_file_and_goes_on_from_its_start(tmp_path: Path) -> None:
    first = TensorBoardLog(tmp_path / "tb", [0])
    first.add(steps(0, 1, 8))
    first.close()
    second = TensorBoardLog(tmp_path / "tb", [8])  # opened within the same second: a file of its own
    second.marker("continued at step 8")
    second.add(steps(0, 9, 12, t=T0 + 5))
    second.close()
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2
    acc = read(tmp_path / "tb")
    assert [s for s, _ in scalars(acc, "loss/worker0")] == list(range(1, 13))
    assert markers(acc) == [(8, "continued at step 8")]


def test_records_are_kept_until_a_write_is_due_or_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tb = TensorBoardLog(tmp_path / "tb", [0])
    tb.add(steps(0, 1, 3))
    assert "loss/worker0" not in read(tmp_path / "tb").Tags()["scalars"]
    tb.flush()  # a checkpoint's
    assert [s for s, _ in scalars(read(tmp_path / "tb"), "loss/worker0")] == [1, 2, 3]
    monkeypatch.setattr("core.runfiles.tensorboard_log.WRITE_S", 0.0)
    tb.add(steps(0, 4, 4))
    assert [s for s, _ in scalars(read(tmp_path / "tb"), "loss/worker0")] == [1, 2, 3, 4]
    tb.close()


def test_a_search_draws_a_curve_per_trial(tmp_path: Path) -> None:
    tb = TensorBoardLog(tmp_path / "tb", [0, 0])
    tb.add([R.step_record(0, 1, 1, 10, 0.5, 0.1, t=T0, trial=3), R.step_record(1, 1, 1, 10, 0.4, 0.2, t=T0, trial=4)])
    tb.close()
    tags = read(tmp_path / "tb").Tags()["scalars"]
    assert {"loss/trial3", "loss/trial4", "lr/trial3"} <= set(tags)


def test_flatten_gives_dotted_keys_of_values_hparams_take() -> None:
    assert flatten({"a": {"b": 1, "c": [1, 2], "d": {"x": "y"}, "e": None}}) == {
        "a.b": 1,
        "a.c": "[1,2]",
        "a.d": '{"x":"y"}',
        "a.e": "null",
    }


def test_the_evaluation_pictures() -> None:
    cm = confusion_image([[3, 1], [0, 4]], ["a", "b"])
    assert cm.dtype == np.uint8 and cm.ndim == 3 and cm.shape[2] == 3
    scatter = predicted_vs_actual([[1.0, 1.1], [2.0, 1.9], [float("nan"), 1.0]])
    assert scatter.dtype == np.uint8 and scatter.shape[2] == 3
    assert evaluation_image({"task": "regression", "pairs": [[1.0, 2.0]]})[0] == "predicted_vs_actual"
    assert evaluation_image({"confusion": [[1]], "per_class": [{"class": "a"}]})[0] == "confusion_matrix"
    assert evaluation_image({"task": "regression", "pairs": []}) is None and evaluation_image({}) is None
