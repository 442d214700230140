"""The Model group's pretrained backbones: the suggested ones among the model choices (their size, input and
whether their weights are here), any other timm name typed, where the weights come from, and what trains.

The suggested list and the cached marks come from core.services.pretrained (a table and a look into
huggingface_hub's cache: no timm import on the GUI thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QToolButton

from app.panel.fields import Bindings
from core.config import Config
from core.services import pretrained

OTHER = "timm"  # the model choice of a backbone typed by its timm name
FILE = "file"  # the weights choice of a file
HERE = "✓"  # the mark of a backbone whose weights are in the cache


def backbone_label(b: pretrained.Backbone, cached: bool) -> str:
    return f"{b.describe()}  {HERE}" if cached else b.describe()


def narrow(combo: QComboBox, chars: int = 14, whole_tip: bool = False) -> None:
    """The combo's width never follows its longest item (a backbone's line): the panel keeps its width. Its
    list opens as wide as its longest item, and with ``whole_tip`` the combo's tooltip is the chosen item
    whole, so a name is never read cut ("…224p")."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(chars)

    def fit() -> None:
        metrics = combo.view().fontMetrics()
        widest = max((metrics.horizontalAdvance(combo.itemText(i)) for i in range(combo.count())), default=0)
        scroll = combo.view().verticalScrollBar().sizeHint().width()
        combo.view().setMinimumWidth(widest + scroll + 3 * metrics.averageCharWidth())  # item margins, frame

    def tip() -> None:
        combo.setToolTip(combo.currentText())

    model = combo.model()
    for signal in (model.rowsInserted, model.rowsRemoved, model.dataChanged, model.modelReset):
        signal.connect(fit)
    fit()
    if whole_tip:
        combo.currentIndexChanged.connect(tip)
        model.dataChanged.connect(tip)  # the chosen item's text changed (its weights came into the cache)
        tip()


class BackboneRows:
    """The backbone rows of the Model group's form; ``combo_model`` lists the suggested backbones."""

    def __init__(
        self, form: QFormLayout, combo_model: QComboBox, bindings: Bindings, browse: Callable[[], None]
    ) -> None:
        self.form, self.combo_model = form, combo_model
        combo_model.insertSeparator(combo_model.count())
        for b in pretrained.SUGGESTED:
            combo_model.addItem(b.describe(), b.kind)
        combo_model.addItem("Other timm backbone…", OTHER)
        narrow(combo_model, whole_tip=True)
        self.refresh_marks()

        self.edit_timm_model = QLineEdit(objectName="edit_timm_model")
        self.edit_timm_model.setPlaceholderText("a timm name, e.g. resnet34.a1_in1k")
        self.edit_timm_model.setToolTip("Any architecture timm knows (timm.list_models()), with its pretrained tag")
        form.addRow("timm name", self.edit_timm_model)

        self.combo_weights = QComboBox(objectName="combo_weights")
        self.combo_weights.addItem("Pretrained (hub)", "hub")
        self.combo_weights.addItem("Random", "none")
        self.combo_weights.addItem("From a file…", FILE)
        self.combo_weights.setToolTip(
            "Pretrained: from the Hugging Face hub, downloaded once into huggingface_hub's cache (Start downloads "
            "them first); random: no pretrained weights; "
            "a file: .safetensors or .pth in timm's key layout"
        )
        narrow(self.combo_weights)
        form.addRow("Weights", self.combo_weights)
        self.edit_weights_file = QLineEdit(objectName="edit_weights_file")
        self.edit_weights_file.setPlaceholderText("path/to/weights.safetensors")
        self.button_browse_weights = QToolButton(objectName="button_browse_weights")
        self.button_browse_weights.setText("…")
        self.button_browse_weights.setToolTip("Choose a .safetensors or .pth file")
        self.button_browse_weights.clicked.connect(browse)
        self.weights_row = QHBoxLayout()
        self.weights_row.setSpacing(4)
        self.weights_row.addWidget(self.edit_weights_file, 1)
        self.weights_row.addWidget(self.button_browse_weights)
        form.addRow("Weights file", self.weights_row)
        self.label_weights = QLabel(objectName="label_weights")
        self.label_weights.setWordWrap(True)
        form.addRow("", self.label_weights)

        self.combo_finetune = bindings.row(
            form,
            "model.finetune",
            "Train",
            name="combo_finetune",
            labels=("Head only (frozen backbone)", "Whole network"),
        )
        narrow(self.combo_finetune)
        self.spin_backbone_lr_mult = bindings.row(
            form, "optim.backbone_lr_mult", "Backbone rate ×", name="spin_backbone_lr_mult", decimals=3, step=0.05
        )
        self.combo_weights.currentIndexChanged.connect(lambda _i: self.update_weights_label())

    # -- the model choice ------------------------------------------------------------------------
    def refresh_cached(self) -> None:
        """Mark again the backbones whose weights are in the cache (one was just downloaded)."""
        self.refresh_marks()
        self.update_weights_label()

    def refresh_marks(self) -> None:
        """Mark the suggested backbones whose weights are in the hub's cache (after a download, say)."""
        combo = self.combo_model
        for b in pretrained.SUGGESTED:
            i = combo.findData(b.kind)
            cached = pretrained.cached_weights(b.kind) is not None
            combo.setItemText(i, backbone_label(b, cached))
            tip = "weights in the cache" if cached else "weights downloaded from the Hugging Face hub on Start"
            combo.setItemData(i, f"{b.name}: {b.params:,} parameters, {tip}", Qt.ItemDataRole.ToolTipRole)

    def kind(self, choice: Any) -> str | None:
        """The model.kind of a backbone choice (None: not a backbone)."""
        if choice == OTHER:
            name = self.edit_timm_model.text().strip()
            return name if name.startswith(pretrained.PREFIX) else pretrained.PREFIX + name
        if isinstance(choice, str) and choice.startswith(pretrained.PREFIX):
            return choice
        return None

    def choice_of(self, kind: str) -> str | None:
        """The combo's choice for a model.kind that is a backbone (the typed name shown), else None."""
        if not kind.startswith(pretrained.PREFIX):
            self.edit_timm_model.setText("")
            return None
        if pretrained.suggested(kind) is not None:
            self.edit_timm_model.setText("")
            return kind
        self.edit_timm_model.setText(kind[len(pretrained.PREFIX) :])
        return OTHER

    # -- the weights -----------------------------------------------------------------------------
    def show_config(self, cfg: Config) -> None:
        weights = cfg.model.weights
        choice = weights if weights in ("hub", "none") else FILE
        self.combo_weights.setCurrentIndex(self.combo_weights.findData(choice))
        self.edit_weights_file.setText(weights if choice == FILE else "")
        self.update_weights_label()

    def take(self, raw: dict[str, dict[str, Any]]) -> None:
        choice = self.combo_weights.currentData()
        raw["model"]["weights"] = self.edit_weights_file.text().strip() if choice == FILE else choice

    def choose_weights_file(self, path: str) -> None:
        self.combo_weights.setCurrentIndex(self.combo_weights.findData(FILE))
        self.edit_weights_file.setText(path)

    def update_weights_label(self) -> None:
        choice = self.combo_weights.currentData()
        b = pretrained.suggested(str(self.combo_model.currentData()))
        if choice != "hub":
            text = ""
        elif b is not None and pretrained.cached_weights(b.kind) is not None:
            text = f"{HERE} in the cache: Start uses them"
        else:
            text = "Start downloads them first (once), with its progress in the status bar"
        self.label_weights.setText(text)
        self.form.setRowVisible(self.label_weights, bool(text) and self._is_backbone())

    def _is_backbone(self) -> bool:
        return self.kind(self.combo_model.currentData()) is not None

    def update_visibility(self) -> None:
        backbone = self._is_backbone()
        self.form.setRowVisible(self.edit_timm_model, self.combo_model.currentData() == OTHER)
        self.form.setRowVisible(self.combo_weights, backbone)
        self.form.setRowVisible(self.weights_row, backbone and self.combo_weights.currentData() == FILE)
        self.form.setRowVisible(self.combo_finetune, backbone)
        self.form.setRowVisible(self.spin_backbone_lr_mult, backbone and self.combo_finetune.currentData() == "full")
        self.update_weights_label()
