"""The call log: which AWS operations this process called, for the whole-suite IAM check.

With ``CAPA_AWS_CALL_LOG=<dir>`` in the environment, every client of :class:`~capa_py.aws.session.AWSClients`
appends ``<service> <operation>`` to ``<dir>/calls-<pid>.log`` the first time capa-py's own code (not a
test calling a client directly to set up its world) in the process calls that operation: one short line per
distinct operation, never a parameter, a response or a credential. Child processes (the CLI, a controller)
inherit the variable and write their own file. ``tests/conftest.py`` sets it for the test suite, and
``tests/harness/iam_calls.py`` checks the calls against the IAM policies.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

CALL_LOG_ENV = "CAPA_AWS_CALL_LOG"

_CAPA_PACKAGES = ("capa_py.", "resources.", "controllers.", "capa_app.")
_CLIENT_LAYER = ("capa_py.aws.",)


def _made_by_capa() -> bool:
    """Whether capa-py's own code (above the client layer) is on the stack: a test that calls a client
    directly to set up its world (a key pair, an image) is not a call capa-py makes."""
    frame = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", "")) + "."
        if module.startswith(_CAPA_PACKAGES) and not module.startswith(_CLIENT_LAYER):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


_lock = threading.Lock()
_seen: set[tuple[str, str, str]] = set()
_seen_pid = 0


def note_call(service: str, operation: str) -> None:
    """Log that this process called ``operation`` of ``service`` (once per process, when logging is on)."""
    directory = os.environ.get(CALL_LOG_ENV)
    if not directory or not _made_by_capa():
        return
    global _seen_pid
    key = (directory, service, operation)
    with _lock:
        pid = os.getpid()
        if pid != _seen_pid:  # a forked child logs to a file of its own
            _seen.clear()
            _seen_pid = pid
        if key in _seen:
            return
        _seen.add(key)
        try:
            with (Path(directory) / f"calls-{pid}.log").open("a", encoding="ascii") as log:
                log.write(f"{service} {operation}\n")
        except OSError:
            _seen.discard(key)  # a directory that is gone: the suite is over, nothing to check


def read_call_logs(directory: Path) -> set[tuple[str, str]]:
    """Every ``(service, operation)`` the processes logging into ``directory`` called."""
    calls: set[tuple[str, str]] = set()
    for path in sorted(directory.glob("calls-*.log")):
        for line in path.read_text(encoding="ascii").splitlines():
            service, _, operation = line.partition(" ")
            if service and operation:
                calls.add((service, operation))
    return calls
