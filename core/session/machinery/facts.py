"""What a session shows of its run, kept where the run's pieces write it: :class:`RunFacts`.

The run's pieces (the collector, health, the end) learn how the run goes: its
best evaluation, why it stopped early, its error, its summary, and (a search)
the config of the model it hands on. They write these into the one
:class:`RunFacts` of the run's :class:`~core.session.machinery.context.RunContext`,
never into the session; the session reads them from there, and shows each as
an attribute of its own (a :class:`Shown` descriptor), so its callers read
``session.error`` as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

if TYPE_CHECKING:
    from core.config import Config

T = TypeVar("T")


@dataclass
class RunFacts:
    """The facts of one run that its session shows, written by whoever learns them."""

    config: Config  # the run's config: a live change's, then (a search) the handed-on model's
    error: str | None = None  # one line, when the run failed
    best: dict[str, Any] | None = None  # the run's best evaluation: monitor, value, worker, epoch
    stop_reason: str | None = None  # why a run ended early yet finished (early stopping)
    early_stop: dict[str, Any] | None = None  # the early stop's decision: monitor, patience, epoch (of the evaluation)
    summary: dict[str, Any] | None = None  # summary.json, once written


class HasFacts(Protocol):
    facts: RunFacts


class Shown(Generic[T]):
    """An attribute of a session that is the same-named field of its :class:`RunFacts`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Shown[T]: ...

    @overload
    def __get__(self, obj: HasFacts, owner: type | None = None) -> T: ...

    def __get__(self, obj: HasFacts | None, owner: type | None = None) -> T | Shown[T]:
        if obj is None:
            return self
        return cast(T, getattr(obj.facts, self.name))

    def __set__(self, obj: HasFacts, value: T) -> None:
        setattr(obj.facts, self.name, value)
