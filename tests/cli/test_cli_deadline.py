"""``--timeout`` bounds the whole command, the reconciles it runs included.

Every AWS call is made slow (a ``before-send`` hook on every client the command makes, against a real moto
server over HTTP), so a reconcile is always mid-call when the timeout passes. The call in flight may
finish; no AWS call may start after the command's deadline. The hook records each call's start relative to
that deadline (the one the command set, read in the calling context), so nothing here depends on how long
the command took. Before the fix, reconciles ran on after the timeout, starting call after call, and the
command returned minutes late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.client import BaseClient

from capa_py.aws.session import register_client_hook
from tests.cli.cli_support import Cli
from tests.e2e.e2e_support import EXAMPLE
from tests.harness.moto_server import MotoServer

SLOW_CALL = 1.0
"""Seconds each AWS call takes (before it is sent)."""

APPLY_TIMEOUT = 15
DELETE_TIMEOUT = 10
"""Long enough for a command started on a loaded machine (imports, the store, the controllers) to reach its
first AWS calls before the deadline; far too short for the example's 50-odd calls (100-odd to delete) at
:data:`SLOW_CALL` each, so the deadline always cuts the work short."""


@dataclass
class CallStarts:
    """Each AWS call's start, in seconds after the command's deadline (negative: before it)."""

    after_deadline: list[tuple[str, float | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hook(self, client: BaseClient, service: str) -> None:
        def before_send(event_name: str, **_: Any) -> None:
            from capa_py.aws import deadline

            limit = deadline.current()
            with self.lock:
                self.after_deadline.append(
                    (event_name.rsplit(".", 1)[-1], None if limit is None else time.monotonic() - limit.at)
                )
            time.sleep(SLOW_CALL)

        client.meta.events.register("before-send", before_send)


@pytest.fixture
def slow_calls() -> Iterator[CallStarts]:
    starts = CallStarts()
    unregister = register_client_hook(starts.hook)
    yield starts
    unregister()


def test_apply_starts_no_aws_call_after_its_timeout_and_says_what_was_in_progress(
    cli: Cli, cli_moto: MotoServer, slow_calls: CallStarts
) -> None:
    cli_moto.reset()
    result = cli(
        "apply", "-f", str(EXAMPLE), "--aws-endpoint", cli_moto.url, "--timeout", f"{APPLY_TIMEOUT}s"
    )
    assert result.exit_code == 1, f"an apply cut short by its timeout exits 1:\n{result}"
    calls = slow_calls.after_deadline
    assert calls, f"the apply made no AWS call:\n{result}"
    assert all(at is not None for _, at in calls), f"an AWS call ran without the command's deadline: {calls}"
    late = [(op, at) for op, at in calls if at is not None and at >= 0]
    assert not late, f"AWS calls started after the deadline (seconds after it): {late}\n{result}"
    assert f"not ready after {APPLY_TIMEOUT}s (--timeout)" in result.stderr, str(result)
    progress = [line for line in result.stderr.splitlines() if line.startswith("still in progress: ")]
    assert progress, f"the apply does not say what was still in progress:\n{result}"
    assert "AWSCluster default/demo (pending)" in progress[0], progress
    stopped = [line for line in result.stderr.splitlines() if line.startswith("stopped at the deadline: ")]
    assert stopped, f"the apply does not say which reconcile the deadline cut short:\n{result}"
    assert any(" before ec2:" in line or " before elbv2:" in line for line in stopped), stopped


def test_delete_wait_starts_no_aws_call_after_its_timeout(
    cli: Cli, cli_moto: MotoServer, slow_calls: CallStarts, tmp_path: Path
) -> None:
    cli_moto.reset()
    # The objects stored without waiting, then a delete that must tear down what a short apply made.
    applied = cli(
        "apply", "-f", str(EXAMPLE), "--aws-endpoint", cli_moto.url, "--timeout", f"{DELETE_TIMEOUT}s"
    )
    assert applied.exit_code == 1, str(applied)
    slow_calls.after_deadline.clear()
    result = cli(
        "delete",
        "-f",
        str(EXAMPLE),
        "--wait",
        "--aws-endpoint",
        cli_moto.url,
        "--timeout",
        f"{DELETE_TIMEOUT}s",
    )
    assert result.exit_code == 1, f"a delete cut short by its timeout exits 1:\n{result}"
    late = [(op, at) for op, at in slow_calls.after_deadline if at is None or at >= 0]
    assert slow_calls.after_deadline, f"the delete made no AWS call:\n{result}"
    assert not late, f"AWS calls started after the deadline (or without one): {late}\n{result}"
    assert f"not deleted after {DELETE_TIMEOUT}s (--timeout)" in result.stderr, str(result)
    assert "still in progress: " in result.stderr, str(result)
