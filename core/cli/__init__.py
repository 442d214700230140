"""The ``traindesk`` command line: a table of commands, each imported only when it runs.

Every command is a module of this package (``core.cli.train``, ``core.cli.predict``, ...) with a
``configure_cli(parser)`` and a ``cmd_NAME(args) -> exit code``; the services they call know no argparse.

Exit codes: 0 success; 1 the run failed; 2 bad input; 130 interrupted.
Errors are one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, NamedTuple, NoReturn

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

# Commands that live outside core (the window is `app`, which core never imports) are
# named in this entry-point group of pyproject.toml, as a main(argv) -> exit code.
ENTRY_POINT_GROUP = "traindesk.commands"


class Command(NamedTuple):
    summary: str  # its line in `traindesk --help`
    run: str | None  # "module:function(args) -> exit code"; None: the entry point of that name
    configure: str | None = None  # "module:function(parser)" adding its arguments


COMMANDS: dict[str, Command] = {
    "train": Command("train a model from a TOML config", "core.cli.train:cmd_train", "core.cli.train:configure_cli"),
    "runs": Command(
        "list runs with status and each run's own figure", "core.cli.runs:cmd_runs", "core.cli.runs:configure_cli"
    ),
    "race": Command(
        "race clones of a run's state with changed settings; the worse half stops at each rung, the winner goes on",
        "core.cli.race:cmd_race",
        "core.cli.race:configure_cli",
    ),
    "gui": Command("open the desktop window (takes the arguments of traindesk-gui)", None),
    "export": Command(
        "export a run's trained model (safetensors, state-dict, torch-export, onnx), verified",
        "core.cli.export:cmd_export",
        "core.cli.export:configure_cli",
    ),
    "predict": Command(
        "predict classes for a CSV, Parquet, JSON lines, NPZ or image folder with an exported model",
        "core.cli.predict:cmd_predict",
        "core.cli.predict:configure_cli",
    ),
    "evaluate": Command(
        "evaluate a run on its validation split (accuracy, per-class metrics, confusion matrix)",
        "core.cli.evaluate:cmd_evaluate",
        "core.cli.evaluate:configure_cli",
    ),
    "lr-find": Command(
        "suggest a learning rate: the range test of fastai, its valley suggestion printed last",
        "core.cli.lr_find:cmd_lr_find",
        "core.cli.lr_find:configure_cli",
    ),
    "pause": Command(
        "pause the active run in RUN_DIR (started by the window, a CLI train or torchrun)",
        "core.cli.control:cmd_control",
        "core.cli.control:configure_cli",
    ),
    "resume": Command(
        "resume the paused run in RUN_DIR", "core.cli.control:cmd_control", "core.cli.control:configure_cli"
    ),
    "stop": Command(
        "stop the active run in RUN_DIR (its checkpoint and summary are written)",
        "core.cli.control:cmd_control",
        "core.cli.control:configure_cli",
    ),
    "serve": Command(
        "serve a trained model over HTTP: batching worker processes, health, metrics, reload",
        "core.cli.serve:cmd_serve",
        "core.cli.serve:configure_cli",
    ),
    "bench": Command(
        "probe each strategy and worker count on a config and suggest the fastest",
        "core.cli.advise:cmd_advise",
        "core.cli.advise:configure_cli",
    ),
}


class ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{self.prog}: {message}")


def _load(target: str) -> Callable[..., Any]:
    """The function a "module:function" names, importing its module."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command with its summary; only ``command``'s module is imported, to add its arguments."""
    parser = _Parser(prog="traindesk", description="Train PyTorch models with several processes.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, info in COMMANDS.items():
        sp = sub.add_parser(name, help=info.summary, description=info.summary)
        sp.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
        if name == command and info.configure:
            _load(info.configure)(sp)
    return parser


def _command_name(argv: Sequence[str]) -> str | None:
    """The first word that is not an option (the top-level options take no value); None for --help."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _run_entry_point(name: str, argv: list[str]) -> int:
    found = entry_points(group=ENTRY_POINT_GROUP, name=name)
    if not found:
        raise ArgumentError(
            f"traindesk: command {name!r} is not installed "
            f"(no {name!r} in the {ENTRY_POINT_GROUP!r} entry points; pip install -e .)"
        )
    main = next(iter(found)).load()
    rest = argv[argv.index(name) + 1 :]
    return int(main([a for a in rest if a != "--debug"]) or 0)  # --debug is ours (tracebacks), not its


def main(argv: Sequence[str] | None = None) -> int:
    from core.errors import INPUT_ERRORS

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    from core.cli.streams import guard_output

    guard_output()  # a reader that goes away (| head, a closed terminal) never breaks a command
    try:
        name = _command_name(argv)
        if name in COMMANDS and COMMANDS[name].run is None:
            return _run_entry_point(name, argv)
        args = _build_parser(name).parse_args(argv)
        run = COMMANDS[args.command].run
        assert run is not None, args.command  # entry-point commands returned above
        return int(_load(run)(args))
    except ArgumentError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_INPUT
    except INPUT_ERRORS as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(" ".join(str(exc).splitlines()) + "\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)\n")
        return EXIT_FAILED
