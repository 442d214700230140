"""Serve tab: serve a run or an exported model over HTTP (``traindesk serve``) and watch it live.

``ServeView()``; ``set_model(path)``, ``start()``, ``stop()`` do what the
controls do; ``shutdown()`` (the window's close) stops the server and waits.
The server is a child process (QProcess running ``python -m core serve``):
nothing here blocks the GUI thread. Once its URL is printed the view reads
``/metrics`` and ``/ready`` once a second (QNetworkAccessManager, async) and
plots latency percentiles (p50/p95/p99 over each second, from the latency
histogram) and requests/s, the batch sizes formed, and each worker's state.
The try-it form is built from ``/openapi.json``: a field per column (or
one for the sample's values), Send, and the answer; the curl line beside it
is ready to copy. ``url_ready`` (the URL), ``stopped`` (the exit code) and
``failed`` (one line) tell what happened.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QByteArray, QProcess, QProcessEnvironment, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtNetwork import QNetworkAccessManager, QNetworkReply, QNetworkRequest
from PySide6.QtWidgets import (
    QFileDialog, QFormLayout, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton,
    QScrollArea, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QToolButton, QVBoxLayout, QWidget,
)

from core.run_dir import RunDir

ROOT = Path(__file__).resolve().parents[1]
MODEL_FILTER = "Models (*.safetensors *.pt2 *.onnx *.pt model.json)"
HISTORY = 120          # seconds of latency and throughput kept in the plots
POLL_MS = 1000
STOP_WAIT_MS = 15000   # a drain answers what it holds; then the process is killed


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of a Prometheus histogram's cumulative (upper bound, count) buckets, interpolated
    linearly within a bucket, as PromQL's histogram_quantile does; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            inside = count - prev_count
            frac = (rank - prev_count) / inside if inside > 0 else 1.0
            return prev_bound + (bound - prev_bound) * frac
        prev_bound, prev_count = bound, count
    return prev_bound


def parse_metrics(text: str) -> dict[str, Any]:
    """What the tab shows from /metrics: counters and histograms (cumulative buckets) by name."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"ok": 0.0, "latency": [], "batch": [], "restarts": 0.0, "queue": 0.0, "version": ""}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "traindesk_serve_requests_total" and s.labels.get("endpoint") == "predict":
                if s.labels.get("status") == "200":
                    out["ok"] += s.value
            elif s.name == "traindesk_serve_latency_seconds_bucket":
                out["latency"].append((float(s.labels["le"]), s.value))
            elif s.name == "traindesk_serve_batch_rows_bucket":
                out["batch"].append((float(s.labels["le"]), s.value))
            elif s.name == "traindesk_serve_worker_restarts_total":
                out["restarts"] = s.value
            elif s.name == "traindesk_serve_queue_rows":
                out["queue"] = s.value
            elif s.name == "traindesk_serve_model_info":
                out["version"] = s.labels.get("version", "")
    out["latency"].sort()
    out["batch"].sort()
    return out


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
        self._last: tuple[float, dict[str, Any]] | None = None
        self._t0 = 0.0
        self.series: dict[str, list[float]] = {"t": [], "p50": [], "p95": [], "p99": [], "rps": []}
        self.schema: dict[str, Any] | None = None
        self.fields: list[tuple[str, QLineEdit]] = []
        self.net = QNetworkAccessManager(self)
        self._replies: set[QNetworkReply] = set()
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self._poll)

        self.edit_model = QLineEdit(objectName="edit_serve_model", placeholderText="a run directory or a model file")
        browse_file = QPushButton("Model file…", objectName="button_serve_browse_file")
        browse_file.clicked.connect(self._browse_file)
        browse_run = QPushButton("Run folder…", objectName="button_serve_browse_run")
        browse_run.clicked.connect(self._browse_run)
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
        self.label_status = QLabel("not serving", objectName="label_serve_status")
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

        self.plot_serve_latency = pg.PlotWidget(title="latency (ms)")
        self.plot_serve_latency.setObjectName("plot_serve_latency")
        self.plot_serve_latency.addLegend(offset=(5, 5))
        self.curves = {q: self.plot_serve_latency.plot(name=q, pen=pg.mkPen(color, width=2))
                       for q, color in (("p50", "#1f77b4"), ("p95", "#ff7f0e"), ("p99", "#d62728"))}
        self.plot_serve_throughput = pg.PlotWidget(title="requests/s")
        self.plot_serve_throughput.setObjectName("plot_serve_throughput")
        self.curve_rps = self.plot_serve_throughput.plot(pen=pg.mkPen("#2ca02c", width=2))
        self.plot_serve_batches = pg.PlotWidget(title="batch sizes formed (rows per batch)")
        self.plot_serve_batches.setObjectName("plot_serve_batches")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.8, brush="#9467bd")
        self.plot_serve_batches.addItem(self.bars)
        for plot in (self.plot_serve_latency, self.plot_serve_throughput):
            plot.setLabel("bottom", "s")
        self.table_workers = QTableWidget(0, 5, objectName="table_serve_workers")
        self.table_workers.setHorizontalHeaderLabels(["worker", "pid", "state", "version", "restarts"])
        self.table_workers.verticalHeader().setVisible(False)

        plots = QGridLayout()
        plots.addWidget(self.plot_serve_latency, 0, 0)
        plots.addWidget(self.plot_serve_throughput, 0, 1)
        plots.addWidget(self.plot_serve_batches, 1, 0)
        plots.addWidget(self.table_workers, 1, 1)
        plots_box = QWidget()
        plots_box.setLayout(plots)

        # the try-it form: fields from the schema, the answer, and the curl line
        self.form = QFormLayout()
        form_widget = QWidget()
        form_widget.setLayout(self.form)
        scroll = QScrollArea(objectName="scroll_serve_form", widgetResizable=True)
        scroll.setWidget(form_widget)
        self.button_send = QPushButton("Send", objectName="button_serve_send", enabled=False)
        self.button_send.clicked.connect(self.send)
        self.text_answer = QPlainTextEdit(objectName="text_serve_answer", readOnly=True)
        self.text_answer.setMaximumBlockCount(200)
        self.edit_curl = QLineEdit(objectName="edit_serve_curl", readOnly=True)
        copy = QPushButton("Copy", objectName="button_serve_copy_curl")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.edit_curl.text()))
        curl_row = QHBoxLayout()
        curl_row.addWidget(self.edit_curl, 1)
        curl_row.addWidget(copy)
        try_box = QGroupBox("Try it")
        try_layout = QVBoxLayout(try_box)
        try_layout.addWidget(scroll, 3)
        try_layout.addWidget(self.button_send)
        try_layout.addWidget(self.text_answer, 2)
        try_layout.addWidget(QLabel("curl:"))
        try_layout.addLayout(curl_row)

        split = QSplitter(objectName="splitter_serve")
        split.addWidget(plots_box)
        split.addWidget(try_box)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(model_row)
        layout.addLayout(serve_row)
        layout.addWidget(self.label_status)
        layout.addWidget(split, 1)
        self._update_actions()

    # ------------------------------------------------------------------ choosing

    def set_model(self, path: str | Path) -> None:
        self.edit_model.setText(str(path))

    def _browse_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model to serve", "", MODEL_FILTER)
        if path:
            self.set_model(path)

    def _browse_run(self) -> None:
        names = RunDir("runs")
        title = f"Run to serve (its {names.best.name}, else {names.last.name})"
        path = QFileDialog.getExistingDirectory(self, title, "runs")
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
        proc.readyReadStandardOutput.connect(self._read_stdout)
        proc.readyReadStandardError.connect(self._read_stderr)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._process_error)
        self.process = proc
        self._stdout = b""
        self._stderr_tail = []
        self.url = ""
        self._last = None
        for key in self.series:
            self.series[key] = []
        args = ["-m", "core", "serve", model, "--port", str(self.spin_port.value()),
                "--workers", str(self.spin_workers.value())]
        self.label_status.setText(f"starting: traindesk serve {model} …")
        proc.start(sys.executable, args)
        self._update_actions()

    def stop(self) -> None:
        """Ask the server to drain and exit (SIGTERM); it is killed if it has not ended in a while."""
        if not self.serving:
            return
        assert self.process is not None
        self.label_status.setText("stopping: answering what it holds…")
        self.process.terminate()
        QTimer.singleShot(STOP_WAIT_MS, self._kill_if_running)

    def _kill_if_running(self) -> None:
        if self.serving and self.process is not None:
            self.process.kill()

    def shutdown(self, timeout_ms: int = STOP_WAIT_MS) -> None:
        """Stop the server and wait for it (the window is closing)."""
        self.timer.stop()
        for reply in list(self._replies):
            reply.abort()
        if self.serving and self.process is not None:
            self.process.terminate()
            if not self.process.waitForFinished(timeout_ms):
                self.process.kill()
                self.process.waitForFinished(5000)

    def _read_stdout(self) -> None:
        assert self.process is not None
        self._stdout += bytes(self.process.readAllStandardOutput().data())
        for line in self._stdout.decode(errors="replace").splitlines():
            if line.startswith("http://") and not self.url:
                self._serving_at(line.strip())

    def _read_stderr(self) -> None:
        assert self.process is not None
        text = bytes(self.process.readAllStandardError().data()).decode(errors="replace")
        self._stderr_tail = (self._stderr_tail + [t for t in text.splitlines() if t.strip()])[-20:]

    def _serving_at(self, url: str) -> None:
        self.url = url
        self._t0 = time.monotonic()
        self.label_status.setText(f"serving at {url}  (POST /predict, GET /docs, /metrics, /ready)")
        self.timer.start()
        self._get("/openapi.json", self._got_schema)
        self._poll()
        self._update_actions()
        self.url_ready.emit(url)

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self.timer.stop()
        if code != 0 or status != QProcess.ExitStatus.NormalExit:
            why = self._stderr_tail[-1] if self._stderr_tail else f"exit code {code}"
            self._fail(f"serve ended: {why}")
        else:
            self.label_status.setText("not serving (stopped)")
        self.url = ""
        self.button_send.setEnabled(False)
        self._update_actions()
        self.stopped.emit(code if status == QProcess.ExitStatus.NormalExit else -1)

    def _process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
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

    def _get(self, path: str, done: Any) -> None:
        self._request("GET", path, None, done)

    def _request(self, method: str, path: str, body: bytes | None, done: Any) -> None:
        if not self.url:
            return
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
            if status is not None and not aborted:
                done(int(status), data)

        reply.finished.connect(finished)

    def _poll(self) -> None:
        self._get("/metrics", self._got_metrics)
        self._get("/ready", self._got_ready)

    def _got_metrics(self, status: int, data: bytes) -> None:
        if status != 200:
            return
        now = time.monotonic()
        m = parse_metrics(data.decode(errors="replace"))
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-6)
            self.series["t"].append(now - self._t0)
            self.series["rps"].append((m["ok"] - before["ok"]) / dt)
            window = [(b, c - c0) for (b, c), (_, c0) in zip(m["latency"], before["latency"])]
            for q in ("p50", "p95", "p99"):
                value = histogram_quantile(int(q[1:]) / 100, window)
                self.series[q].append(float("nan") if value is None else value * 1000)
            for key in self.series:
                del self.series[key][:-HISTORY]
            t = self.series["t"]
            for q, curve in self.curves.items():
                curve.setData(t, self.series[q], connect="finite")
            self.curve_rps.setData(t, self.series["rps"])
        self._last = (now, m)
        counts = [c - prev for (_, c), (_, prev) in zip(m["batch"], [(0, 0.0)] + m["batch"][:-1])]
        bounds = [b for b, _ in m["batch"]]
        shown = [(i, n) for i, (b, n) in enumerate(zip(bounds, counts)) if not math.isinf(b)]
        self.bars.setOpts(x=[i for i, _ in shown], height=[n for _, n in shown])
        axis = self.plot_serve_batches.getAxis("bottom")
        axis.setTicks([[(i, f"≤{int(bounds[i])}") for i, _ in shown]])
        self.polled.emit()

    def _got_ready(self, status: int, data: bytes) -> None:
        try:
            info = json.loads(data)
        except ValueError:
            return
        workers = info.get("workers") or []
        self.table_workers.setRowCount(len(workers))
        for r, w in enumerate(workers):
            for c, key in enumerate(("worker", "pid", "state", "version", "restarts")):
                self.table_workers.setItem(r, c, QTableWidgetItem(str(w.get(key, ""))))

    # ------------------------------------------------------------------ try it

    def _got_schema(self, status: int, data: bytes) -> None:
        if status != 200:
            return
        spec = json.loads(data)
        self.schema = spec
        while self.form.rowCount():
            self.form.removeRow(0)
        self.fields = []
        choices = spec["components"]["schemas"]["PredictRequest"]["oneOf"]
        rows = next((c for c in choices if "rows" in c["properties"]), None)
        if rows is not None:
            for name in rows["properties"]["rows"]["items"]["properties"]:
                edit = QLineEdit("0", objectName=f"edit_serve_field_{name}")
                self.form.addRow(name, edit)
                self.fields.append((name, edit))
        else:
            inputs = next(c for c in choices if "inputs" in c["properties"])
            edit = QLineEdit(objectName="edit_serve_field_inputs",
                             placeholderText=inputs["properties"]["inputs"].get("description", "values"))
            self.form.addRow("values (comma-separated)", edit)
            self.fields.append(("", edit))
        example = spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["example"]
        text = json.dumps(example, separators=(",", ":"))
        self.edit_curl.setText(f"curl -s {self.url}/predict -H 'Content-Type: application/json' -d '{text}'")
        self.button_send.setEnabled(True)

    def body(self) -> dict[str, Any]:
        """The try-it form's request body."""
        def number(text: str) -> Any:
            try:
                return float(text)
            except ValueError:
                return text  # sent as it is: the server names what is wrong with it

        if self.fields and self.fields[0][0]:
            return {"rows": [{name: number(edit.text().strip()) for name, edit in self.fields}]}
        values = [number(v.strip()) for v in self.fields[0][1].text().split(",") if v.strip()] if self.fields else []
        return {"inputs": [values]}

    def send(self) -> None:
        def done(status: int, data: bytes) -> None:
            try:
                shown = json.dumps(json.loads(data), indent=1)
            except ValueError:
                shown = data.decode(errors="replace")
            text = f"HTTP {status}\n{shown}"
            self.text_answer.setPlainText(text)
            self.answered.emit(text)

        self._request("POST", "/predict", json.dumps(self.body()).encode(), done)
