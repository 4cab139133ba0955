"""What ``capa apply``/``delete`` show while they wait: the live progress view (each object's readiness and
conditions, on a terminal) and, on any stderr, why an object being deleted cannot go yet
(:class:`DeletionNotices`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from capa_py.api.meta import KubeObject
from capa_py.runtime.events import events_for
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore
from controllers.run import readiness as readiness_of

DELETION_BLOCKED = "DeletionBlocked"
"""The reason of the event a controller records while a deletion waits on something (and why)."""
_EPOCH = datetime.min.replace(tzinfo=UTC)
NOTICE_INTERVAL = 1.0
"""Seconds between two reads of the targets' events."""

_SYMBOL = {"True": "[green]✓[/]", "False": "[red]✗[/]", "Unknown": "[yellow]…[/]"}


def _conditions(obj: KubeObject | None) -> str:
    status: Any = getattr(obj, "status", None)
    conditions = getattr(status, "conditions", None) or []
    parts = []
    for condition in conditions:
        if condition.type == "Ready":
            continue
        parts.append(f"{condition.type} {_SYMBOL.get(condition.status, '?')}")
    return "  ".join(parts)


def _waiting_on(obj: KubeObject | None) -> str:
    status: Any = getattr(obj, "status", None)
    for condition in getattr(status, "conditions", None) or []:
        if condition.type == "Ready" and condition.status != "True":
            return f"{condition.reason or ''}: {condition.message or ''}".strip(": ")
    return ""


def render(
    targets: Sequence[KubeObject],
    current: Sequence[KubeObject | None],
    states: Sequence[str],
    blocked: Mapping[str, object] | None = None,
) -> Table:
    """One row per target; ``blocked`` (by ``ref()``) replaces a row's state and what it waits on."""
    blocked = blocked or {}
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("OBJECT", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("CONDITIONS")
    table.add_column("WAITING ON", overflow="fold")
    colours = {"ready": "green", "failed": "red", "pending": "yellow", "gone": "dim", "blocked": "red"}
    for target, obj, readiness in zip(targets, current, states, strict=True):
        why = blocked.get(target.ref())
        state = "blocked" if why is not None else readiness
        table.add_row(
            f"{target.KIND.lower()}/{target.name}",
            f"[{colours.get(state, 'white')}]{state}[/]",
            _conditions(obj),
            str(why) if why is not None else _waiting_on(obj),
        )
    return table


class ProgressView:
    """A rich Live table on a terminal; nothing otherwise."""

    def __init__(self, console: Console, targets: Sequence[KubeObject], enabled: bool) -> None:
        self.console = console
        self.targets = list(targets)
        self.enabled = enabled and console.is_terminal
        self._live: Live | None = None
        self._current: Sequence[KubeObject | None] = [None] * len(self.targets)
        self._drawn = False

    def __enter__(self) -> ProgressView:
        if self.enabled:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, current: Sequence[KubeObject | None]) -> None:
        if self._live is None or len(current) != len(self.targets):
            return
        if self._drawn and all(a is b for a, b in zip(current, self._current, strict=True)):
            return  # the same objects as last time: nothing to draw again
        self._drawn = True
        self._current = list(current)
        self._live.update(render(self.targets, current, [readiness_of(o) for o in current]))

    def show_blocked(self, blocked: Mapping[str, object]) -> None:
        """Leave the table showing which objects are blocked, and why (by ``ref()``)."""
        if self._live is None or not blocked:
            return
        states = [readiness_of(o) for o in self._current]
        self._live.update(render(self.targets, self._current, states, blocked))

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)


class DeletionNotices:
    """Print, as soon as it is recorded and once, why a target being deleted cannot go yet: the message of
    its latest ``DeletionBlocked`` event (``awscluster/demo: deletion blocked: waiting for 3 AWSMachine(s)
    to be deleted: ...``). A controller records that event again on every retry; a new message (fewer
    machines left) is printed once too. The store is read at most every :data:`NOTICE_INTERVAL` seconds,
    and only for targets being deleted."""

    def __init__(self, console: Console, store: ObjectStore, targets: Sequence[KubeObject]) -> None:
        self.console = console
        self.store = store
        self.targets = list(targets)
        self._said: set[tuple[str, str]] = set()
        self._next = 0.0

    def update(self, current: Sequence[KubeObject | None]) -> None:
        if len(current) != len(self.targets) or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + NOTICE_INTERVAL
        for target, obj in zip(self.targets, current, strict=True):
            if obj is None or not obj.being_deleted:
                continue
            try:
                blocked = [e for e in events_for(self.store, obj) if e.reason == DELETION_BLOCKED]
            except StoreError:
                continue  # a notice is never worth failing the wait over
            if not blocked:
                continue
            # The one recorded last (of two in the same second, the one made last: names follow creation).
            latest = max(reversed(blocked), key=lambda e: e.last_timestamp or e.first_timestamp or _EPOCH)
            message = latest.message or ""
            if (target.ref(), message) in self._said:
                continue
            self._said.add((target.ref(), message))
            self.console.print(
                f"{target.KIND.lower()}/{target.name}: deletion blocked: {message}",
                markup=False,
                highlight=False,
            )


def ticker(*views: Callable[[list[KubeObject | None]], None]) -> Callable[[list[KubeObject | None]], None]:
    """One tick callback that calls each of ``views`` in turn."""

    def tick(current: list[KubeObject | None]) -> None:
        for view in views:
            view(current)

    return tick
