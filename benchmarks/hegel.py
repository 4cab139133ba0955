"""What a Hegel request costs as the number of Hardware grows (Hegel finds callers in its index).

Run: ``.venv/bin/python -m benchmarks.hegel [--hardware 10,100,1000] [--requests N] [--json PATH]``. For
each count, a SQLite store in a temp directory holds that many Hardware (the caller's among them), Hegel
serves it on a loopback port, and one client connecting from 127.0.0.2 asks for ``meta-data/instance-id``
``--requests`` times one after the other over a kept-alive connection, after one request not measured
(the first waits for Hegel's index to list the Hardware). Prints the latency p50/p99 and the
requests per second; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import aiohttp  # noqa: E402

from capa_py.api.tinkerbell import Hardware  # noqa: E402
from capa_py.logging import configure_logging  # noqa: E402
from capa_py.store import SQLiteStore  # noqa: E402
from capa_py.tinkerbell.hegel import start_in_thread  # noqa: E402


def _hardware(index: int) -> Hardware:
    # 127.0.0.2 is the caller; the others are addresses of 10.0.0.0/8 nobody calls from.
    ip = "127.0.0.2" if index == 0 else f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256 or 1}"
    mac = f"02:00:{index >> 24 & 255:02x}:{index >> 16 & 255:02x}:{index >> 8 & 255:02x}:{index & 255:02x}"
    return Hardware.model_validate(
        {
            "apiVersion": "tinkerbell.org/v1alpha2",
            "kind": "Hardware",
            "metadata": {"name": f"machine-{index}"},
            "spec": {"networkInterfaces": {mac: {"dhcp": {"ip": ip, "netmask": "255.0.0.0"}}}},
        }
    )


async def _requests(url: str, count: int) -> tuple[list[float], float]:
    """The latency of each request, and the seconds they took together (the first, unmeasured, aside)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url) as response:  # waits for the index's first list
            await response.read()
        begun = time.perf_counter()
        for _ in range(count):
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
                assert response.status == 200, response.status
            latencies.append(time.perf_counter() - started)
        return latencies, time.perf_counter() - begun


def measure(hardware: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, SQLiteStore(Path(tmp) / "state.db") as store:
        for index in range(hardware):
            store.create(_hardware(index))
        running = start_in_thread(store, "127.0.0.1", 0)
        try:
            latencies, elapsed = asyncio.run(
                _requests(f"{running.url}/2009-04-04/meta-data/instance-id", requests)
            )
        finally:
            running.stop()
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "hardware": hardware,
        "requests": requests,
        "p50_ms": round(cuts[49] * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        "requests_per_second": round(requests / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="10,100,1000", help="Hardware counts, comma-separated.")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure_logging("console", 0)  # warnings only: no access log line per request
    figures = []
    print(f"{'hardware':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
    for count in (int(c) for c in args.hardware.split(",")):
        figure = measure(count, args.requests)
        figures.append(figure)
        print(
            f"{figure['hardware']:>9} {figure['p50_ms']:>8} {figure['p99_ms']:>8} "
            f"{figure['requests_per_second']:>8}",
            flush=True,
        )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
