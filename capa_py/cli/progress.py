"""The live progress view of ``capa apply``/``delete``: each object's readiness and conditions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from capa_py.api.meta import KubeObject

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
    targets: Sequence[KubeObject], current: Sequence[KubeObject | None], states: Sequence[str]
) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("OBJECT", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("CONDITIONS")
    table.add_column("WAITING ON", overflow="fold")
    colours = {"ready": "green", "failed": "red", "pending": "yellow", "gone": "dim"}
    for target, obj, state in zip(targets, current, states, strict=True):
        table.add_row(
            f"{target.KIND.lower()}/{target.name}",
            f"[{colours.get(state, 'white')}]{state}[/]",
            _conditions(obj),
            _waiting_on(obj),
        )
    return table


class ProgressView:
    """A rich Live table on a terminal; nothing otherwise."""

    def __init__(self, console: Console, targets: Sequence[KubeObject], enabled: bool) -> None:
        self.console = console
        self.targets = list(targets)
        self.enabled = enabled and console.is_terminal
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.enabled:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, current: Sequence[KubeObject | None]) -> None:
        if self._live is None or len(current) != len(self.targets):
            return
        from controllers.run import readiness

        self._live.update(render(self.targets, current, [readiness(o) for o in current]))

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
