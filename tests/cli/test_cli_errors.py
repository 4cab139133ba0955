"""The console entry point (:func:`capa_app.cli.main.run`): a failure no command expected is one ``error:``
line and exit 1, its traceback only in the debug log (``-vv``); before, it was a Python traceback."""

from __future__ import annotations

import logging
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from capa_app.cli import main
from capa_py.api.registry import REGISTRY
from capa_py.store.errors import Unavailable


@pytest.fixture
def entry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """``capa --state … get clusters`` through ``run()``, logging configuration put back afterwards."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    monkeypatch.setattr("sys.argv", ["capa", "--state", str(tmp_path / "state.db"), "get", "clusters"])
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def _resolve_failing(exc: BaseException) -> object:
    def resolve(name: str) -> object:
        raise exc

    return resolve


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        (RuntimeError("boom\nsecond line"), "error: RuntimeError: boom (run with -vv for the traceback)"),
        (sqlite3.OperationalError("disk I/O error"), "error: the store failed: disk I/O error"),
        (PermissionError(13, "Permission denied", "/some/file"), "error: Permission denied: /some/file"),
        (Unavailable("/some/state.db", "gone"), "error: cannot open the store at /some/state.db: gone"),
    ],
)
def test_an_unexpected_failure_is_one_line_and_exit_1(
    entry: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: BaseException,
    line: str,
) -> None:
    monkeypatch.setattr(REGISTRY, "resolve", _resolve_failing(failure))
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exited:
        main.run()
    assert exited.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [line]
    assert signal.getsignal(signal.SIGINT) is handler, "run() left its SIGINT handler installed"


def test_the_traceback_is_in_the_debug_log(
    entry: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["capa", "-vv", *__import__("sys").argv[1:]])
    monkeypatch.setattr(REGISTRY, "resolve", _resolve_failing(RuntimeError("boom")))
    with pytest.raises(SystemExit):
        main.run()
    err = capsys.readouterr().err
    assert "Traceback" in err, err
    assert "RuntimeError: boom" in err, err
    assert err.strip().splitlines()[-1] == "error: RuntimeError: boom (run with -vv for the traceback)"
