"""The config panel's background work: describing the chosen dataset and counting the model's parameters.

Both run off the GUI thread (app.shell.tasks.BackgroundCalls), debounced while the
user types; descriptions are cached by what they depend on, and a result that
arrives after the choice changed is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer

from app.panel.data_group import TABLES
from app.shell.tasks import BackgroundCalls
from core.config import ConfigError

if TYPE_CHECKING:
    from app.panel.panel import ConfigPanel


class SourceDescriber(QObject):
    """Describes the panel's dataset and counts its model's parameters, into the panel's labels."""

    def __init__(self, panel: ConfigPanel) -> None:
        super().__init__(panel)
        self.panel = panel
        self.calls = BackgroundCalls(panel)
        self._info_cache: dict[tuple[Any, ...], Any] = {}
        self._describe_key: tuple[Any, ...] | None = None
        self._params_key: Any = None
        self._errors = {"data": "", "model": ""}  # what the last description and count said was wrong
        self.timer = QTimer(panel, singleShot=True, interval=150)  # debounce typing
        self.timer.timeout.connect(self.refresh)

    @property
    def error(self) -> str:
        """Why the chosen dataset or model cannot be trained, as described ("" when nothing is known wrong)."""
        return self._errors["data"] or self._errors["model"]

    def _set_error(self, what: str, message: str) -> None:
        if self._errors[what] != message:
            self._errors[what] = message
            self.panel.problem_changed.emit()

    def _key_now(self) -> tuple[Any, ...]:
        return self.panel.data.describe_key(self.panel.shown_task())

    def refresh(self) -> None:
        key = self._key_now()
        info = self._info_cache.get(key)
        if info is not None:
            self._set_error("data", "")
            self.panel.fit_model_to(info)
            self._show_info(info)
            self._refresh_params(info)
            return
        if key == self._describe_key:
            return  # already being described
        self._describe_key = key
        self._set_error("data", "")
        self.panel.data.label_dataset_summary.setText("Reading the dataset…")
        self.panel.model.label_model_params.setText("")

        def describe() -> Any:
            from core.services.data import describe_source

            source, target, size, task, columns = key
            return describe_source(source, target, size, task=task, columns=dict(columns))

        self.calls.call(
            describe,
            lambda info: self._on_described(key, info),
            lambda exc: self._on_describe_failed(key, exc),
            name="describe-source",
        )

    def _on_described(self, key: tuple[Any, ...], info: Any) -> None:
        self._info_cache[key] = info
        if key == self._describe_key:
            self._describe_key = None
            self.refresh()

    def _on_describe_failed(self, key: tuple[Any, ...], exc: BaseException) -> None:
        if key != self._describe_key:
            return
        self._describe_key = None
        self._params_key = None  # a valid dataset picked again counts its parameters again
        self.panel.data.label_dataset_summary.setText(f"⚠ {exc}")
        self.panel.model.label_model_params.setText("")
        self._set_error("model", "")
        self._set_error("data", str(exc))
        self._clear_preview()
        if key[0] != self.panel.data.columns_of:  # the same table (a kind or target the engine refuses): its list
            self._show_columns(None)  # stays, to undo the change or pick another target
            if str(key[0]).startswith(TABLES):
                self._list_columns(key)  # another table: its columns still, to set the kind the error asks for

    def _list_columns(self, key: tuple[Any, ...]) -> None:
        def describe() -> Any:
            from core.services.data import describe_columns

            source, target, _size, _task, columns = key
            return describe_columns(source, target, columns=dict(columns))

        def listed(info: Any) -> None:
            if key == self._key_now() and self.panel.data.columns_of is None:  # still this choice, still failing
                self._show_columns(info)

        self.calls.call(describe, listed, lambda _exc: None, name="describe-columns")

    def _show_info(self, info: Any) -> None:
        self.panel.data.show_info(info, self._key_now())
        self._show_images_available()

    def _show_images_available(self) -> None:
        """Whether the data shown has images to augment: the preview button, and (the user's own settings) the
        augmentation widgets."""
        self.panel.tuning.set_images_available(bool(self.panel.data.images))
        if self.panel.mode == "edit":
            self.panel.tuning.show_augment_for(self.panel.data, self.panel.model)

    def _show_columns(self, info: Any) -> None:
        self.panel.data.show_columns(info, self._key_now())

    def _clear_preview(self) -> None:
        self.panel.data.clear_preview()
        self._show_images_available()

    def _refresh_params(self, info: Any) -> None:
        if info.needs_target:  # a table's columns alone: no model's input is known yet
            self._params_key = None
            self._set_error("model", "")
            self.panel.model.label_model_params.setText("")
            return
        try:
            model_cfg = self.panel.config().model
        except ConfigError:
            self.panel.model.label_model_params.setText("")
            self._set_error("model", "")  # the config's own error says what is wrong
            return
        key = (model_cfg, info.input_shape, info.num_classes, info.image_shape, info.categories, info.texts)
        if key == self._params_key:
            return
        self._params_key = key

        def count() -> int:
            from core.services.models import parameter_count

            return parameter_count(model_cfg, info)  # what a run builds, a table's embeddings too

        def done(n: int) -> None:
            if key == self._params_key:
                self.panel.model.label_model_params.setText(f"{n:,} parameters")
                self._set_error("model", "")

        def failed(exc: BaseException) -> None:
            if key == self._params_key:
                self.panel.model.label_model_params.setText(f"⚠ {exc}")
                self._set_error("model", str(exc))

        self.panel.model.label_model_params.setText("Counting parameters…")
        self.calls.call(count, done, failed, name="count-parameters")

    def shutdown(self, timeout_s: float) -> None:
        self.timer.stop()
        self.calls.forget_all()
        self.calls.wait_all(timeout_s)
