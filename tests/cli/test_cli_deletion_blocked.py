"""A deletion that cannot progress says why as soon as that is known, once, not after the timeout.

Deleting only the AWSCluster of a cluster whose machines are still stored: its controller records a
``DeletionBlocked`` event ("waiting for 3 AWSMachine(s) to be deleted: ...") on every retry, and the delete
waits. ``capa delete --wait`` prints that message on stderr while it is still waiting (the test sees the
line and the process still running: no timing involved), and prints it once however often the event is
recorded again. Before the fix nothing was said until the timeout, and then only "not deleted after".
The real ``capa`` runs in a subprocess against a moto server over HTTP.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.e2e.e2e_support import EXAMPLE, Capa, wait_for
from tests.harness.moto_server import MotoServer

MESSAGE = "waiting for 3 AWSMachine(s) to be deleted: "


def _blocked_count(capa: Capa) -> int:
    """How many times the AWSCluster's DeletionBlocked event was recorded (its ``count``)."""
    events = capa.ok("get", "events", "-o", "json").json()["items"]
    return sum(
        int(e.get("count") or 1)
        for e in events
        if e.get("reason") == "DeletionBlocked" and e["involvedObject"]["kind"] == "AWSCluster"
    )


def test_delete_wait_prints_the_deletion_blocked_reason_once_while_it_waits(
    cli_moto: MotoServer, tmp_path: Path
) -> None:
    cli_moto.reset()
    capa = Capa(state=tmp_path / "state.db", endpoint=cli_moto.url)
    capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "5m", timeout=360)

    argv = ["--state", str(capa.state), "delete", "awscluster", "demo", "--wait", "--timeout", "30m"]
    argv += ["--aws-endpoint", cli_moto.url]
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "capa_app.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=capa.env(),
        cwd=capa.state.parent,
    ) as process:
        assert process.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
        reader.start()
        try:
            said = wait_for(lambda: any(MESSAGE in line for line in lines), timeout=120)
            running = process.poll() is None
            # Let the controller record the event again a few times (it retries every 5 s).
            repeated = said and wait_for(lambda: _blocked_count(capa) >= 3, timeout=120, interval=1.0)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            reader.join(timeout=10)
    text = "".join(lines)
    assert said, f"delete --wait did not say why the AWSCluster's deletion is blocked:\n{text}"
    assert running, f"the reason was printed only as the delete ended:\n{text}"
    assert repeated, f"the DeletionBlocked event was not recorded again:\n{text}"
    notices = [line for line in lines if MESSAGE in line]
    assert len(notices) == 1, f"the reason should be printed once, not on every retry:\n{text}"
    assert notices[0].startswith("awscluster/demo: deletion blocked: waiting for 3 AWSMachine(s)"), notices
    assert "demo-control-plane-0" in notices[0], notices
