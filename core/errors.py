"""Errors that mean "the user's input is wrong": the CLI prints them as one line, exit 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming the key."""


class UserError(Exception):
    """Bad input from the user (data, model file, arguments); message is one line."""


class DataError(UserError):
    """A data source cannot be used: missing file, bad column, empty, ..."""


class ModelError(UserError):
    """A model cannot be built: bad custom file, wrong output size, ..."""


class RunError(UserError):
    """A run directory or checkpoint cannot be used."""


class ModelFileError(RunError):
    """A model file given as input (an export, its model.json, a state dict) cannot be used.

    A kind of ``RunError``: what a run left behind (its checkpoint, its exports) is read the same way.
    """


class PeersLost(Exception):
    """A torchrun rank waited on its peers for the process group's timeout and gave up (one line: what it waited
    for). Not the user's input: the command says it and fails."""


class DownloadCancelled(Exception):
    """A download stopped by its progress reporter (the window's Cancel): not a failure to explain."""


INPUT_ERRORS: tuple[type[Exception], ...] = (UserError, ConfigError)

__all__ = [
    "ConfigError",
    "DataError",
    "DownloadCancelled",
    "INPUT_ERRORS",
    "ModelError",
    "ModelFileError",
    "PeersLost",
    "RunError",
    "UserError",
]
