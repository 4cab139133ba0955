"""The live progress view of a workflow run: each task done, running, failed or pending, and its time.

Feed it the runner's :class:`~capa_py.workflow.runner.TaskEvent`s (it is a progress callback). On a
terminal it redraws a rich table as events arrive; elsewhere it draws nothing and :meth:`render` still
gives the table (for a final summary).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from capa_py.workflow.runner import TaskEvent
from capa_py.workflow.workflow import Workflow

_STATE_STYLE = {
    "done": "[green]✓ done[/]",
    "resumed": "[green]✓ done earlier[/]",
    "running": "[yellow]… running[/]",
    "failed": "[red]✗ failed[/]",
    "pending": "[dim]pending[/]",
}


class WorkflowProgress:
    """Task states of one workflow run, drawn as a table."""

    def __init__(self, workflow: Workflow[Any], console: Console, live: bool = True) -> None:
        self.workflow = workflow
        self.console = console
        self.states: dict[str, str] = dict.fromkeys(workflow.task_names, "pending")
        self.seconds: dict[str, float] = {}
        self.live = live and console.is_terminal
        self._live: Live | None = None

    def __call__(self, event: TaskEvent) -> None:
        state = {"started": "running", "finished": "done", "failed": "failed", "skipped": "resumed"}
        self.states[event.task] = state[event.kind]
        if event.seconds is not None:
            self.seconds[event.task] = event.seconds
        if self._live is not None:
            self._live.update(self.render())

    def render(self) -> Table:
        table = Table(
            box=None, pad_edge=False, show_edge=False, header_style="bold", title=self.workflow.name
        )
        table.add_column("#", justify="right")
        table.add_column("TASK", no_wrap=True)
        table.add_column("STATE", no_wrap=True)
        table.add_column("TIME", justify="right")
        for number, (name, state) in enumerate(self.states.items(), start=1):
            took = self.seconds.get(name)
            table.add_row(str(number), name, _STATE_STYLE[state], "" if took is None else f"{took:.1f}s")
        return table

    def __enter__(self) -> WorkflowProgress:
        if self.live:
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(exc_type, exc, tb)
            self._live = None
