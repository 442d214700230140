"""Serve tab: serve a run or an exported model over HTTP (``traindesk serve``) and watch it live.

``ServeView()``; ``set_model(path)``, ``start()``, ``stop()`` do what the
controls do; ``shutdown()`` (the window's close) stops the server and waits.
The server is a child process (QProcess running ``python -m core serve``):
nothing here blocks the GUI thread. Once its URL is printed the view reads
``/metrics`` and ``/ready`` once a second (QNetworkAccessManager, async) and
plots latency percentiles (p50/p95/p99 over each second, from the latency
histogram) and requests/s, the batch sizes formed, and the current workers'
states (app.viewmodels.serve_metrics). The try-it form (app.views.serve_form) is built from
``/openapi.json``: a table model's raw columns, an image model's image files
(chosen or dropped, sent at once; the chosen one's picture and top classes
shown), else its inputs; Send, the answer, and the curl line that sends the
same body. ``url_ready`` (the URL),
``stopped`` (the exit code) and ``failed`` (one line) tell what happened.

Stop asks the server to drain (SIGTERM) and arms a kill timer that belongs to
that process: it dies with it, so it never reaches a server started later.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import shiboken6
from PySide6.QtCore import QByteArray, QProcess, QProcessEnvironment, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtNetwork import QNetworkAccessManager, QNetworkReply, QNetworkRequest
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.plots.base import PlotColors
from app.shell.elided_label import ElidedLabel
from app.viewmodels.serve_metrics import histogram_quantile, parse_metrics
from app.views.image_answer import ImageAnswer
from app.views.serve_form import TryItForm, answer_text, curl_line, image_curl_line
from app.views.serve_monitor import ServeMonitor
from core.services.formats import model_file_filter
from core.services.runs.files import RunDir

__all__ = ["ServeView", "histogram_quantile", "parse_metrics"]

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILTER = model_file_filter("Models")  # the formats registry's files
POLL_MS = 1000
STOP_WAIT_MS = 15000  # a drain answers what it holds; then the process is killed
QWIDGETSIZE_MAX = (1 << 24) - 1  # Qt's "no maximum" for a widget's size
BANNER = "serving "  # the start-up line `traindesk serve` writes on stderr (core/cli/serve.py): not a reason


class ServeView(QWidget):
    url_ready = Signal(str)
    stopped = Signal(int)
    failed = Signal(str)
    polled = Signal()
    answered = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tab_serve")
        self.url = ""
        self.process: QProcess | None = None
        self._stdout = b""
        self._stderr_tail: list[str] = []
        self._generation = 0  # which server a reply is of: one started later ignores an earlier one's
        self.schema: dict[str, Any] | None = None
        self._offered = ""  # the model the window offered (the run on screen), not one the user chose
        self.net = QNetworkAccessManager(self)
        self._replies: set[QNetworkReply] = set()
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self._poll)

        self.edit_model = QLineEdit(objectName="edit_serve_model", placeholderText="a run directory or a model file")
        browse_file = QPushButton("Model file…", objectName="button_serve_browse_file")
        browse_file.clicked.connect(lambda: self._browse(folder=False))
        browse_run = QPushButton("Run folder…", objectName="button_serve_browse_run")
        browse_run.clicked.connect(lambda: self._browse(folder=True))
        self.spin_port = QSpinBox(objectName="spin_serve_port", minimum=0, maximum=65535, value=8000)
        self.spin_port.setToolTip("0: any free port")
        self.spin_workers = QSpinBox(objectName="spin_serve_workers", minimum=1, maximum=64, value=2)
        self.action_serve_start = QAction("Start serving", self, objectName="action_serve_start")
        self.action_serve_start.triggered.connect(self.start)
        self.action_serve_stop = QAction("Stop serving", self, objectName="action_serve_stop")
        self.action_serve_stop.triggered.connect(self.stop)
        start_button = QToolButton(objectName="button_serve_start")
        start_button.setDefaultAction(self.action_serve_start)
        stop_button = QToolButton(objectName="button_serve_stop")
        stop_button.setDefaultAction(self.action_serve_stop)
        # one line whatever it says (a URL, an error): elided, whole in its tooltip, never wider than the tab
        self.label_status = ElidedLabel("not serving", objectName="label_serve_status")
        self.label_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        # two rows, so that the tab fits beside the settings panel in a 900 px window
        model_row = QHBoxLayout()
        model_row.addWidget(QLabel("Model:"))
        model_row.addWidget(self.edit_model, 1)
        model_row.addWidget(browse_file)
        model_row.addWidget(browse_run)
        serve_row = QHBoxLayout()
        serve_row.addWidget(QLabel("Port:"))
        serve_row.addWidget(self.spin_port)
        serve_row.addWidget(QLabel("Workers:"))
        serve_row.addWidget(self.spin_workers)
        serve_row.addStretch(1)
        serve_row.addWidget(start_button)
        serve_row.addWidget(stop_button)

        split = QSplitter(objectName="splitter_serve")
        self.monitor = ServeMonitor()
        for name in (
            "plot_serve_latency",
            "plot_serve_throughput",
            "plot_serve_batches",
            "table_workers",
            "curves",
            "series",
        ):
            setattr(self, name, getattr(self.monitor, name))  # the view's widgets under their own names
        split.addWidget(self.monitor)
        split.addWidget(self._build_try_it())
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([550, 450])  # the form gets room for its names and values, not what its hint asks
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(model_row)
        layout.addLayout(serve_row)
        layout.addWidget(self.label_status)
        layout.addWidget(split, 1)
        self._update_actions()

    def _build_try_it(self) -> QGroupBox:
        # the try-it form: fields from the schema, the answer, and the curl line that sends the same body
        self.try_form = TryItForm()
        self.try_form.changed.connect(self._update_curl)
        self.try_form.picked.connect(lambda: self.send() if self.url else None)  # a picked image is sent at once
        self.image_answer = ImageAnswer("serve")
        self.image_answer.hide()
        self.label_serve_image = self.image_answer.label_image
        self.table_serve_top_classes = self.image_answer.table_top
        self._image_answers: dict[Path, dict[str, float]] = {}  # the last answer per image sent
        self.label_form_title = ElidedLabel(objectName="label_serve_form_title")  # one line: room for the fields
        self.label_form_title.hide()
        self.scroll_form = scroll = QScrollArea(objectName="scroll_serve_form", widgetResizable=True)
        scroll.setWidget(self.try_form)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.button_send = QPushButton("Send", objectName="button_serve_send", enabled=False)
        self.button_send.clicked.connect(self.send)
        self.text_answer = QPlainTextEdit(objectName="text_serve_answer", readOnly=True)
        self.text_answer.setMaximumBlockCount(200)
        self.text_answer.setMinimumHeight(_lines_high(self, 3))
        self.edit_curl = QLineEdit(objectName="edit_serve_curl", readOnly=True)
        self.edit_curl.setToolTip("The curl line that sends the form's body: select it, or Copy")
        copy = QPushButton("Copy", objectName="button_serve_copy_curl")
        copy.setToolTip("Copy the curl line")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.edit_curl.text()))
        for button in (self.button_send, copy):  # as wide as their words: the curl line keeps the rest
            button.setMaximumWidth(button.fontMetrics().horizontalAdvance(button.text()) + 24)
        curl_row = QHBoxLayout()  # Send, or the same request from a shell: one row, the answer gets the height
        curl_row.addWidget(self.button_send)
        curl_row.addWidget(QLabel("curl:"))
        curl_row.addWidget(self.edit_curl, 1)
        curl_row.addWidget(copy)
        box = QGroupBox("Try it", objectName="group_serve_try")
        box.setMinimumWidth(260)
        try_layout = QVBoxLayout(box)
        try_layout.setSpacing(4)
        try_layout.addWidget(self.label_form_title)
        try_layout.addWidget(scroll, 3)
        try_layout.addLayout(curl_row)
        try_layout.addWidget(self.image_answer)
        try_layout.addWidget(self.text_answer, 1)
        return box

    def apply_colors(self, colors: PlotColors) -> None:
        """The theme's plot colours (the window calls this at start and on every theme change)."""
        self.monitor.apply_colors(colors)

    # ------------------------------------------------------------------ choosing

    def set_model(self, path: str | Path) -> None:
        self.edit_model.setText(str(path))

    def offer_model(self, path: str | Path) -> None:
        """The run on screen, unless the user chose another model (or one is being served)."""
        text = self.edit_model.text().strip()
        if self.serving or (text and text != self._offered) or text == str(path):
            return
        self._offered = str(path)
        self.set_model(path)

    def _browse(self, folder: bool) -> None:
        if folder:
            names = RunDir("runs")
            title = f"Run to serve (its {names.best.name}, else {names.last.name})"
            path = QFileDialog.getExistingDirectory(self, title, "runs")
        else:
            path, _ = QFileDialog.getOpenFileName(self, "Model to serve", "", MODEL_FILTER)
        if path:
            self.set_model(path)

    # ------------------------------------------------------------------ the server process

    @property
    def serving(self) -> bool:
        return self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning

    def start(self) -> None:
        model = self.edit_model.text().strip()
        if not model:
            self._fail("choose a run directory or a model file to serve")
            return
        if self.serving:
            return
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONPATH", str(ROOT) + (":" + env.value("PYTHONPATH") if env.contains("PYTHONPATH") else ""))
        env.insert("PYTHONUNBUFFERED", "1")
        proc.setProcessEnvironment(env)
        # every signal names its process: a server that ended is not confused with the one started after it
        proc.readyReadStandardOutput.connect(lambda p=proc: self._read_stdout(p))
        proc.readyReadStandardError.connect(lambda p=proc: self._read_stderr(p))
        proc.finished.connect(lambda code, status, p=proc: self._finished(p, code, status))
        proc.errorOccurred.connect(lambda error, p=proc: self._process_error(p, error))
        self.process = proc
        self._generation += 1
        self._stdout = b""
        self._stderr_tail = []
        self.url = ""
        self.monitor.reset(time.monotonic())
        # --die-with: the server goes with this window, a crash of it included
        args = [
            "-m",
            "core",
            "serve",
            model,
            "--port",
            str(self.spin_port.value()),
            "--workers",
            str(self.spin_workers.value()),
            "--die-with",
            str(os.getpid()),
        ]
        self.label_status.setText(f"starting: traindesk serve {model} …")
        proc.start(sys.executable, args)
        self._update_actions()

    def stop(self) -> None:
        """Ask the server to drain and exit (SIGTERM); it is killed if it has not ended STOP_WAIT_MS later."""
        if not self.serving:
            return
        proc = self.process
        assert proc is not None
        self.label_status.setText("stopping: answering what it holds…")
        proc.terminate()
        kill = QTimer(proc, objectName="serve_kill_timer", singleShot=True, interval=STOP_WAIT_MS)
        kill.timeout.connect(lambda p=proc: self._kill(p))  # this process's timer: it goes when the process does
        kill.start()

    def _kill(self, proc: QProcess) -> None:
        if proc.state() != QProcess.ProcessState.NotRunning:
            proc.setProperty("killed", True)
            proc.kill()

    def shutdown(self, timeout_ms: int | None = None) -> None:
        """Stop the server and wait for it (the window is closing)."""
        timeout_ms = STOP_WAIT_MS if timeout_ms is None else timeout_ms
        self.timer.stop()
        for reply in list(self._replies):
            reply.abort()
        if self.serving and self.process is not None:
            self.process.terminate()
            if not self.process.waitForFinished(timeout_ms):
                self.process.kill()
                self.process.waitForFinished(5000)

    def _read_stdout(self, proc: QProcess) -> None:
        if proc is not self.process:
            return
        self._stdout += bytes(proc.readAllStandardOutput().data())
        for line in self._stdout.decode(errors="replace").splitlines():
            if line.startswith("http://") and not self.url:
                self._serving_at(line.strip())

    def _read_stderr(self, proc: QProcess) -> None:
        if proc is not self.process:
            return
        text = bytes(proc.readAllStandardError().data()).decode(errors="replace")
        lines = [t for t in text.splitlines() if t.strip() and not t.startswith(BANNER)]
        self._stderr_tail = (self._stderr_tail + lines)[-20:]

    def _serving_at(self, url: str) -> None:
        self.url = url
        self.monitor.reset(time.monotonic())
        self.label_status.setText(f"serving at {url}  (POST /predict, GET /docs, /metrics, /ready)")
        self.timer.start()
        self._request("GET", "/openapi.json", None, self._got_schema)
        self._poll()
        self._update_actions()
        self.url_ready.emit(url)

    def _finished(self, proc: QProcess, code: int, status: QProcess.ExitStatus) -> None:
        if not shiboken6.isValid(proc):  # the view is being destroyed with its server: nothing left to update
            return
        for timer in proc.findChildren(QTimer, "serve_kill_timer"):
            timer.stop()
        proc.deleteLater()
        if proc is not self.process:
            return
        self.process = None
        self.timer.stop()
        if proc.property("killed"):
            self._fail(f"serve ended: killed, it had not stopped {STOP_WAIT_MS / 1000:g} s after Stop")
        elif code != 0 or status != QProcess.ExitStatus.NormalExit:
            why = (
                self._stderr_tail[-1]
                if self._stderr_tail
                else (f"exit code {code}" if status == QProcess.ExitStatus.NormalExit else "the process was killed")
            )
            self._fail(f"serve ended: {why}")
        else:
            self.label_status.setText("not serving (stopped)")
        self.url = ""
        self._generation += 1  # replies still on their way are of a server that is gone
        self.monitor.clear_workers()
        self.button_send.setEnabled(False)
        self._update_actions()
        self.stopped.emit(code if status == QProcess.ExitStatus.NormalExit else -1)

    def _process_error(self, proc: QProcess, error: QProcess.ProcessError) -> None:
        if proc is self.process and error == QProcess.ProcessError.FailedToStart:
            self._fail(f"serve: could not start {sys.executable}")
            self._update_actions()

    def _fail(self, message: str) -> None:
        self.label_status.setText(message)
        self.failed.emit(message)

    def _update_actions(self) -> None:
        running = self.serving
        self.action_serve_start.setEnabled(not running)
        self.action_serve_stop.setEnabled(running)
        for w in (self.edit_model, self.spin_port, self.spin_workers):
            w.setEnabled(not running)

    # ------------------------------------------------------------------ HTTP, asynchronously

    def _request(self, method: str, path: str, body: bytes | None, done: Callable[[int, bytes], None]) -> None:
        if not self.url:
            return
        generation = self._generation
        req = QNetworkRequest(QUrl(self.url + path))
        req.setTransferTimeout(5000)
        if body is None:
            reply = self.net.get(req)
        else:
            req.setHeader(QNetworkRequest.KnownHeaders.ContentTypeHeader, "application/json")
            reply = self.net.post(req, QByteArray(body))
        self._replies.add(reply)

        def finished() -> None:
            self._replies.discard(reply)
            status = reply.attribute(QNetworkRequest.Attribute.HttpStatusCodeAttribute)
            aborted = reply.error() == QNetworkReply.NetworkError.OperationCanceledError
            data = bytes(reply.readAll().data()) if status is not None and not aborted else b""
            reply.deleteLater()
            if status is not None and not aborted and generation == self._generation:
                done(int(status), data)

        reply.finished.connect(finished)

    def _poll(self) -> None:
        self._request("GET", "/metrics", None, self._got_metrics)
        self._request("GET", "/ready", None, self._got_ready)

    def _got_metrics(self, status: int, data: bytes) -> None:
        if status == 200:
            self.monitor.show_metrics(parse_metrics(data.decode(errors="replace")), time.monotonic())
            self.polled.emit()

    def _got_ready(self, status: int, data: bytes) -> None:
        try:
            info = json.loads(data)
        except ValueError:
            return
        self.monitor.show_workers(info.get("workers") or [])  # 503 (not ready) lists them too

    # ------------------------------------------------------------------ try it

    def _got_schema(self, status: int, data: bytes) -> None:
        if status == 200:
            self.show_spec(json.loads(data))

    def show_spec(self, spec: dict[str, Any]) -> None:
        """Build the try-it form from a server's OpenAPI description (its ``x-traindesk`` for a table model)."""
        self.schema = spec
        self.try_form.build(spec)
        self.text_answer.clear()  # the previous model's answer would read as this one's
        self._image_answers = {}
        self.image_answer.clear()
        self.image_answer.setVisible(self.try_form.takes_images)
        if self.try_form.list_images is not None:
            self.try_form.list_images.currentRowChanged.connect(lambda _r: self._show_image_answer())
        # An image form is a button and a row of icons: held to that height, the picture and its classes get the
        # rest, and the answer's text (the classes again, in the table) keeps two lines; a 900x600 window fits.
        images = self.try_form.takes_images
        self.scroll_form.setMaximumHeight(
            self.try_form.images_height() + 2 * self.scroll_form.frameWidth() if images else QWIDGETSIZE_MAX
        )
        self.text_answer.setMinimumHeight(_lines_high(self, 2 if images else 3))
        title = self.try_form.title()
        self.label_form_title.setText(f"Predicts {title}" if title else "")
        self.label_form_title.setVisible(bool(title))
        self.button_send.setEnabled(bool(self.url))

    @property
    def fields(self) -> list[tuple[str, QWidget]]:
        """The form's fields: (column or input name, its widget)."""
        return self.try_form.fields

    def body(self) -> dict[str, Any]:
        """The try-it form's request body."""
        return self.try_form.body()

    def _update_curl(self) -> None:
        if self.try_form.takes_images:
            self.edit_curl.setText(image_curl_line(self.url, self.try_form.images) if self.try_form.images else "")
        else:
            self.edit_curl.setText(curl_line(self.url, self.body()) if self.try_form.fields else "")
        self.edit_curl.setCursorPosition(0)  # its start (curl, the URL) in view, not its tail

    def send(self) -> None:
        sent = list(self.try_form.images)
        if self.try_form.takes_images and not sent:
            self.text_answer.setPlainText("choose image files, or drop them on the form, first")
            return
        try:
            body = self.body()
        except (OSError, ValueError) as exc:  # a chosen file gone or unreadable since it was chosen
            self.text_answer.setPlainText(f"✗ {exc}")
            return

        def done(status: int, data: bytes) -> None:
            if sent:
                self._keep_image_answers(sent, status, data)
            text = answer_text(status, data)
            self.text_answer.setPlainText(text)
            self.answered.emit(text)

        self._request("POST", "/predict", json.dumps(body).encode(), done)

    def _keep_image_answers(self, sent: list[Path], status: int, data: bytes) -> None:
        predictions: list[Any] = []
        if status == 200:
            try:
                predictions = json.loads(data).get("predictions") or []
            except (ValueError, AttributeError):
                predictions = []
        for path, p in zip(sent, predictions):
            self._image_answers[path] = {str(k): float(v) for k, v in (p.get("probabilities") or {}).items()}
        self._show_image_answer()

    def _show_image_answer(self) -> None:
        """The chosen image's picture and its last answer's top classes (none yet: the picture alone)."""
        listed = self.try_form.list_images
        row = listed.currentRow() if listed is not None else -1
        if not 0 <= row < len(self.try_form.images):
            self.image_answer.clear()
            return
        path = self.try_form.images[row]
        self.image_answer.show_answer(path, self._image_answers.get(path, {}))


def _lines_high(widget: QWidget, lines: int) -> int:
    """The height of ``lines`` lines of ``widget``'s text, with a text box's margins."""
    return widget.fontMetrics().lineSpacing() * lines + 8
