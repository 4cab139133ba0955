"""Fixtures shared by every test package; topic-specific fixtures live next to their tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from capa_py.aws.calllog import CALL_LOG_ENV, read_call_logs
from capa_py.store import SQLiteStore
from tests.harness.iam_calls import check_calls, is_whole_run
from tests.peers.fixtures import capi_cluster, peer_cluster  # the real API server, for every package

__all__ = ["capi_cluster", "peer_cluster"]

settings.register_profile(
    "capa", deadline=None, suppress_health_check=(HealthCheck.too_slow,), print_blob=True
)
settings.load_profile("capa")
"""Property tests check what is generated, not how fast: on a machine shared by several test workers, an
example's run time and the generation of its input vary tenfold, and hypothesis' deadline and its too-slow
health check then fail a test whose property holds."""


_CALL_LOG_OWNER = "_capa_call_log_dir"


def pytest_configure(config: pytest.Config) -> None:
    """Every process of the run logs the AWS operations it calls (``CAPA_AWS_CALL_LOG``, inherited by the
    workers and by the CLI and controller processes tests start), unless the caller chose a directory."""
    if hasattr(config, "workerinput") or os.environ.get(CALL_LOG_ENV):
        return
    directory = tempfile.mkdtemp(prefix="capa-aws-calls-")
    os.environ[CALL_LOG_ENV] = directory
    setattr(config, _CALL_LOG_OWNER, directory)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """At the end of a whole run that passed (on xdist's controller only): fail if a call the suite made is
    not granted by the policy, or if the policy grants an action no test called."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    directory = os.environ.get(CALL_LOG_ENV)
    try:
        if directory and exitstatus == 0 and is_whole_run(config):
            from capa_app.iam.policy import granted_actions

            problems = check_calls(read_call_logs(Path(directory)), granted_actions("operator"))
            if problems:
                reporter = config.pluginmanager.get_plugin("terminalreporter")
                lines = ["the AWS calls of the suite and the IAM policy disagree:", *problems]
                if reporter is not None:
                    reporter.write_line("\n".join(lines), red=True)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        owned = getattr(config, _CALL_LOG_OWNER, None)
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
            os.environ.pop(CALL_LOG_ENV, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with slow tests first, the longest first (``slow(minutes=N)``, 1 when unsaid), each file's tests
    in their own order.

    ``make test`` hands whole files to its workers in collection order: a long end-to-end file started last
    would keep one worker busy after the others ran out of work.
    """
    weight: dict[Path, float] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        minutes = float(marker.kwargs.get("minutes", 1)) if marker else 0.0
        weight[item.path] = max(weight.get(item.path, 0.0), minutes)
    items.sort(key=lambda item: -weight[item.path])


@pytest.fixture(autouse=True)
def _logging_as_the_session_began() -> Iterator[None]:
    """structlog's configuration as it was before the test: a test that configures logging (a command run
    in-process does) must not decide what a later test on the same worker logs or captures (a filtering
    wrapper at warning level hides the info lines ``structlog.testing.capture_logs`` looks for)."""
    import structlog

    saved = structlog.get_config()
    saved["processors"] = list(saved["processors"])
    yield
    structlog.configure(**saved)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where the test's SQLite store lives (a fresh file per test)."""
    return tmp_path / "state.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[SQLiteStore]:
    """A real SQLite store with the built-in kinds, closed after the test."""
    with SQLiteStore(store_path) as opened:
        yield opened
