"""What the ``cli`` fixture returns: one in-process ``capa`` invocation's outcome."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class CliResult:
    args: list[str]
    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    exception: BaseException | None

    def __str__(self) -> str:
        crashed = self.exception is not None and not isinstance(self.exception, SystemExit)
        return (
            f"$ capa {' '.join(self.args)}\nexit {self.exit_code} after {self.seconds:.2f}s"
            f"{f' ({self.exception!r})' if crashed else ''}\n"
            f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"
        )


Cli = Callable[..., CliResult]
"""``cli(*args, input=None, state_path=None)``: run ``capa --state STATE ARGS`` in-process."""
