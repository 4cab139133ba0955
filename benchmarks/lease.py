"""What the store lease costs: acquire, renew and release on SQLite, and how fast a waiter takes over.

Run: ``.venv/bin/python -m benchmarks.lease [--repeat N]``. Prints medians and maxima; asserts nothing.

* acquire / renew / release — one attempt each, on a fresh store file (what ``capa apply`` adds before and
  after its controllers run, and every renewal period while they do);
* handover — a candidate waiting in ``acquire`` (its own store connection, as another process has) while
  the holder releases: the time from the start of ``release`` until the waiter holds the lease. The waiter
  watches the record, so this is the store's watch poll interval plus two writes, not a retry period.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from capa_py.logging import configure_logging  # noqa: E402
from capa_py.runtime.leader import LeaderElector  # noqa: E402
from capa_py.store import SQLiteStore  # noqa: E402


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:7.2f} ms   max {max(samples) * 1000:7.2f} ms"


def one_cycle(path: Path) -> tuple[float, float, float]:
    with SQLiteStore(path) as store:
        elector = LeaderElector(store, "bench")
        started = time.perf_counter()
        elector.acquire(wait=False)
        acquired = time.perf_counter()
        elector.try_acquire_or_renew()
        renewed = time.perf_counter()
        elector.release()
        released = time.perf_counter()
    return acquired - started, renewed - acquired, released - renewed


def handover(path: Path) -> float:
    with SQLiteStore(path) as holder_store, SQLiteStore(path) as waiter_store:
        holder = LeaderElector(holder_store, "holder")
        holder.acquire(wait=False)
        took_over = threading.Event()
        at: list[float] = []

        def wait() -> None:
            LeaderElector(waiter_store, "waiter").acquire(wait=True)
            at.append(time.perf_counter())
            took_over.set()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)  # let the waiter find the lease held and start watching it
        started = time.perf_counter()
        holder.release()
        thread.join()
        return at[0] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    configure_logging("console", 0)
    with tempfile.TemporaryDirectory() as scratch:
        cycles = [one_cycle(Path(scratch) / f"cycle-{i}.db") for i in range(args.repeat)]
        print(f"acquire (create)  {_ms([c[0] for c in cycles])}")
        print(f"renew             {_ms([c[1] for c in cycles])}")
        print(f"release           {_ms([c[2] for c in cycles])}")
        handovers = [handover(Path(scratch) / f"handover-{i}.db") for i in range(max(1, args.repeat // 5))]
        print(f"handover          {_ms(handovers)}   ({len(handovers)} runs)")


if __name__ == "__main__":
    main()
