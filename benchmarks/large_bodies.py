"""What large request bodies cost capa serve in memory: its RSS before, during and after N concurrent bodies.

Run: ``.venv/bin/python -m benchmarks.large_bodies [--concurrency N] [--rounds N] [--json PATH]``. Starts
``capa serve`` as its own process over a store in a temp directory (so the RSS read from
``/proc/PID/status`` is the server's alone), then sends ``--rounds`` rounds of ``--concurrency`` concurrent
POSTs, each a ConfigMap body of just under 3 MiB (the API server's body limit; its data is over the 1 MiB
ConfigMap limit, so each is read, decoded and refused 422, nothing stored). Prints the server's RSS before,
its peak while the bodies are read (VmHWM), after the rounds and again after a pause, and how each round's
requests were answered (422, or 429 TooManyRequests once more large bodies are in flight than the server
reads at once). Asserts nothing: the figures are for reading and comparing.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
BODY_BYTES = 3 * 1024 * 1024 - 4096


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"capa serve exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("capa serve did not become ready")


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url + "/api/v1/namespaces/default/configmaps",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        with exc:
            exc.read()
            return int(exc.code)


def _body(index: int) -> bytes:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"large-{index}"}, "data": {}}
    head = json.dumps(doc).encode()
    filler = BODY_BYTES - len(head) - len(b'"blob":""')
    return head.replace(b'"data": {}', b'"data": {"blob":"' + b"x" * filler + b'"}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16, help="bodies sent at once (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of concurrent bodies (default 3)")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds before the last reading")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    bodies = [_body(i) for i in range(args.concurrency)]
    with tempfile.TemporaryDirectory() as directory:
        command = [sys.executable, "-m", "capa_app.cli", "--state", f"{directory}/state.db", "serve"]
        env = {**os.environ, "PYTHONPATH": str(_ROOT)}
        process = subprocess.Popen(
            [*command, "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_ready(url, process)
            figures: dict[str, Any] = {"concurrency": args.concurrency, "body_bytes": BODY_BYTES}
            figures["before"] = _memory(process.pid)
            answers: Counter[int] = Counter()
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                for _ in range(args.rounds):
                    answers.update(pool.map(lambda body: _post(url, body), bodies))
            figures["after"] = _memory(process.pid)
            time.sleep(args.pause)
            figures["after a pause"] = _memory(process.pid)
            figures["answers"] = {str(code): count for code, count in sorted(answers.items())}
        finally:
            process.terminate()
            process.wait(30)
    mib = 1024
    print(f"capa serve, {args.rounds} rounds of {args.concurrency} concurrent bodies of {BODY_BYTES} bytes")
    for moment in ("before", "after", "after a pause"):
        memory = figures[moment]
        print(f"  {moment:14} RSS {memory['VmRSS'] / mib:7.1f} MiB   peak {memory['VmHWM'] / mib:7.1f} MiB")
    print(f"  answers: {figures['answers']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
