"""Running under ``torchrun`` (PyTorch's own launcher): this process is one rank of the group.

``torchrun ... -m core train CONFIG --runs-dir DIR`` starts one process per
rank on every node; each joins the process group from ``env://`` and trains
with the ddp strategy across all ranks. Global rank 0 is also the run's
session: it writes the run directory, polls the control file and takes the
consistent checkpoints. The other ranks write nothing there: their records
reach rank 0 through the process group at the points where the ranks agree
(:meth:`core.worker.trainer.Trainer.exchange_records`), so the nodes need no shared
filesystem for metrics. With ``--max-restarts`` torchrun restarts the group
when a rank dies; rank 0 finds the run by the rendezvous id and resumes it
from its last consistent checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue as queue_mod
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from core.config import Config
from core.config.timm_kind import is_timm
from core.errors import ConfigError, PeersLost
from core.host.machine import keep_freed_memory
from core.launchers.base import WorkerHandle
from core.runfiles.layout import RunDir
from core.strategies import get_strategy
from core.worker.channels import RUN, STOP, Channels, SettingsBox
from core.worker.process import run_worker
from core.worker.spec import WorkerSpec
from core.worker.trainer import default_threads


@dataclass
class _Word:
    value: int = RUN


@dataclass
class _Text:
    value: bytes = b""


class InProcessQueue:
    """Rank 0's queue between its worker thread and its session, in one process."""

    def __init__(self) -> None:
        self._q: queue_mod.Queue[list[dict[str, Any]]] = queue_mod.Queue()

    def put(self, records: list[dict[str, Any]]) -> None:
        self._q.put(records)

    def get(self, timeout: float | None = None) -> list[dict[str, Any]]:
        return self._q.get(timeout=timeout)

    def close(self) -> None:
        pass

    def join_thread(self) -> None:
        pass

    def cancel_join_thread(self) -> None:
        pass


class GatheringQueue:
    """Another rank's records wait here until rank 0 collects them."""

    def __init__(self) -> None:
        self._items: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def put(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self._items.extend(records)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            items, self._items = self._items, []
            return items

    def close(self) -> None:
        pass

    def join_thread(self) -> None:
        pass


def _stop_on_signals(word: _Word, run_event: threading.Event) -> None:
    def on_signal(signum: int, frame: Any) -> None:
        word.value = STOP
        run_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def check_group_config(cfg: Config) -> None:
    """What a run cannot do under torchrun, refused on every rank before the group forms."""
    if cfg.model.text_encoder and cfg.model.finetune == "full" and not is_timm(cfg.model.kind):
        raise ConfigError(
            'config: model.finetune = "full" fine-tunes model.text_encoder in one process, not under torchrun '
            "(each rank would tune its own); tune it in a run of traindesk train and give that run's "
            "text-encoder folder as model.text_encoder"
        )


def torchrun_spec(cfg: Config) -> WorkerSpec:
    """This rank's spec from torchrun's environment: ddp over every rank of the group."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    cfg = cfg.replace("parallel", strategy="ddp", workers=world)
    return WorkerSpec(
        rank=rank,
        world_size=world,
        config=cfg,
        strategy=get_strategy(cfg),
        threads=default_threads(local_world, cfg.parallel.threads_per_worker),
        parent_pid=os.getppid(),
        local_rank=local_rank,
        dist_init="env://",
        node=socket.gethostname(),
    )


class RankThread:
    """This rank's training, on a thread of the session's process (a ``WorkerHandle``, as a Process is)."""

    def __init__(self, target: Callable[[], int]) -> None:
        self.pid = os.getpid()
        self.exitcode: int | None = None
        self._target = target
        self._thread = threading.Thread(target=self._run, name="traindesk-rank", daemon=True)

    def _run(self) -> None:
        try:
            self.exitcode = self._target()
        except BaseException:
            self.exitcode = 1

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def terminate(self) -> None:
        """A thread cannot be ended from outside: the stop word already asks it to stop."""

    kill = terminate


class TorchrunLauncher:
    """Rank 0's launcher (a ``Launcher``): trains this rank on a thread; torchrun started the other ranks."""

    name = "torchrun"

    def __init__(self, restarts: int = 0, samples_lost: int = 0) -> None:
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        self.node = socket.gethostname()
        self.restarts = restarts
        self.samples_lost = samples_lost

    def warm_up(self) -> None:
        pass  # no processes to start: torchrun started them

    def channels(self, command: int) -> Channels:
        run_event = threading.Event()
        run_event.set()
        return Channels(InProcessQueue(), _Word(command), run_event, _Word(0), SettingsBox(_Word(0), _Text()))

    def rendezvous(self, uses_process_group: bool) -> str:
        return "env://"

    def attach(self, run_dir: Path) -> None:
        """The run directory is known: record which rendezvous it belongs to."""
        from core.runfiles.writing import atomic_write_json

        atomic_write_json(
            RunDir(run_dir).torchrun_file,
            {"rdzv_id": os.environ.get("TORCHELASTIC_RUN_ID", ""), "world_size": self.world, "restarts": self.restarts},
        )

    def start(self, specs: list[WorkerSpec], data: Any, shared: list[Any], channels: Channels) -> list[WorkerHandle]:
        import torch

        spec = dataclasses.replace(
            specs[self.rank],
            local_rank=self.local_rank,
            node=self.node,
            gather_records=True,
            parent_pid=os.getpid(),
            threads=default_threads(self.local_world, specs[0].config.parallel.threads_per_worker),
        )
        torch.set_num_threads(spec.threads)
        keep_freed_memory()  # this process trains (a thread of it)
        handle = RankThread(lambda: run_worker(spec, data, shared, channels))
        handle.start()
        return [handle]

    def summary_extra(self, nodes: list[str]) -> dict[str, Any]:
        return {"world_size": self.world, "nodes": nodes, "restarts": self.restarts, "samples_lost": self.samples_lost}

    def end_server_with_workers(self) -> None:
        pass  # no server: torchrun started the ranks

    def workers_ended(self) -> None:
        pass

    def cleanup(self) -> None:
        pass


GROUP_TIMEOUT_S = 120  # the process group's timeout: how long a rank waits on its peers at most
ROUND_POLL_S = 0.02  # how often rank 0 looks for the other ranks' hellos while a round meets


@contextlib.contextmanager
def waiting_for(what: str) -> Iterator[None]:
    """A wait on the other ranks: one that fails or times out becomes :class:`PeersLost` naming ``what``."""
    try:
        yield
    except Exception as exc:  # torch raises DistStoreError, DistBackendError, RuntimeError... for one cause
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PeersLost(
            f"torchrun: rank {os.environ.get('RANK', '?')} gave up waiting for {what} "
            f"(process-group timeout {GROUP_TIMEOUT_S} s): {first[:160]}"
        ) from None


def join_group(cfg: Config) -> None:
    """Join torchrun's process group (from env://) before anything else talks over it.

    With the rendezvous store shared across restarts (torchrun's default), the store still
    holds the last round's keys, and the agents' restart counts differ (an agent whose rank
    died counts a restart, the others do not: pytorch/pytorch#135712), so neither the bare
    store nor a prefix per restart count is safe. The ranks meet in the store under a name
    rank 0 makes up for this round (:func:`round_store`), and the group lives under it.
    """
    import torch.distributed as dist

    backend = "nccl" if cfg.parallel.device.startswith("cuda") else "gloo"
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    timeout = timedelta(seconds=GROUP_TIMEOUT_S)
    with waiting_for(f"the other ranks to join the process group at {where}"):
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            store = dist.TCPStore(
                os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False, timeout=timeout
            )
            group_store = round_store(store, rank, world, GROUP_TIMEOUT_S)
            dist.init_process_group(backend, store=group_store, rank=rank, world_size=world, timeout=timeout)
        else:
            dist.init_process_group(backend, init_method="env://", timeout=timeout)


def round_store(store: Any, rank: int, world: int, timeout_s: float) -> Any:
    """``store`` under a name only this round's ranks know, however many rounds used it before.

    Rank 0 names the round; every other rank says hello with a name of its own, and rank 0
    answers each hello it reads under that name. A hello left by the last round is answered
    too, but nobody waits there, and an answer can only be to a hello of this round, so no
    rank joins a dead round. Rank 0 answers until every rank has taken its answer.
    """
    import secrets
    import time

    import torch.distributed as dist

    deadline = time.monotonic() + timeout_s
    if rank != 0:
        mine = secrets.token_hex(8)
        store.set(f"traindesk/hello/{rank}", mine)
        store.wait([f"traindesk/answer/{mine}"], timedelta(seconds=timeout_s))
        name = store.get(f"traindesk/answer/{mine}").decode()
        store.add(f"traindesk/round/{name}/joined", 1)
        return dist.PrefixStore(f"traindesk/round/{name}", store)
    name = secrets.token_hex(8)
    answered: dict[int, bytes] = {}
    while store.add(f"traindesk/round/{name}/joined", 0) < world - 1:
        for other in range(1, world):
            key = f"traindesk/hello/{other}"
            if store.check([key]):
                hello = store.get(key)
                if answered.get(other) != hello:
                    store.set(f"traindesk/answer/{hello.decode()}", name)
                    answered[other] = hello
        if time.monotonic() > deadline:
            raise TimeoutError(f"{world - 1 - store.add(f'traindesk/round/{name}/joined', 0)} rank(s) never said hello")
        time.sleep(ROUND_POLL_S)
    return dist.PrefixStore(f"traindesk/round/{name}", store)


def find_run(runs_dir: Path) -> tuple[Path, int] | None:
    """The unfinished run this rendezvous id started before (a restart), and its restarts so far.

    Restarted ranks cannot tell a restart from their environment alone (torchrun counts
    restarts per node), so the run directory says: the newest run with this rendezvous id
    that did not finish is continued.
    """
    from core.runfiles.writing import read_summary

    rdzv = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if not rdzv or rdzv == "none" or not Path(runs_dir).is_dir():
        return None
    found = []
    for path in (RunDir(p).torchrun_file for p in Path(runs_dir).iterdir() if p.is_dir()):
        if not path.is_file():
            continue
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if info.get("rdzv_id") == rdzv:
            found.append((path.parent, int(info.get("restarts", 0))))
    if not found:
        return None
    run_dir, restarts = max(found, key=lambda f: f[0].name)
    summary = read_summary(run_dir) or {}
    if summary.get("status") == "finished" or not RunDir(run_dir).has_weights():
        return None
    return run_dir, restarts


def broadcast(obj: Any, what: str = "rank 0's start of the run") -> Any:
    """Rank 0's ``obj`` on every rank."""
    import torch.distributed as dist

    box = [obj]
    with waiting_for(what):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def run_other_rank(cfg: Config, start: dict[str, Any], runs_dir: Path) -> int:
    """A rank other than 0: train in this process; records go to rank 0 through the group."""
    import torch

    from core.data import load_data
    from core.launchers.local import get_context
    from core.training.backbones import BackboneNet, frozen_backbone, image_input, start_pretrained
    from core.training.features import with_features
    from core.training.models import build_model_for

    spec = dataclasses.replace(torchrun_spec(cfg), gather_records=True, **start)
    torch.set_num_threads(spec.threads)
    keep_freed_memory()
    data = load_data(
        spec.config.data,
        seed=cfg.train.seed,
        share=False,
        task=cfg.train.task,
        images=image_input(cfg),
        text_encoder=cfg.model.text_encoder,
    )
    # the weights do not matter: DistributedDataParallel starts every rank from rank 0's
    model = build_model_for(spec.config.model, data.info)
    if frozen_backbone(cfg.model):  # but the features do: this rank's come from the pretrained backbone too
        start_pretrained(cfg.model, [model])
        data, _ = with_features(data, cast(BackboneNet, model), cfg.model.kind, runs_dir, 1, 0, get_context())
    run_event = threading.Event()
    run_event.set()
    word = _Word()
    _stop_on_signals(word, run_event)
    channels = Channels(GatheringQueue(), word, run_event, _Word(0), SettingsBox(_Word(0), _Text()))
    return run_worker(spec, data, [model.state_dict()], channels)
