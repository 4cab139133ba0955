"""glibc's allocator in a long-running process: an arena limit, free memory handed back after a burst, and
the trimmer that does it only once activity happened and the process is quiet again."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading

import pytest

from capa_py.runtime import allocator
from capa_py.runtime.allocator import Trimmer

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)


class Work:
    """An activity counter and an in-progress flag, as the controller process's reconciles give them."""

    def __init__(self) -> None:
        self.done = 0
        self.running = False
        self.released = 0

    def release(self) -> bool:
        self.released += 1
        return True


def trimmer(work: Work) -> Trimmer:
    return Trimmer(lambda: work.done, lambda: work.running, interval=0, release=work.release)


def test_no_trim_without_activity_since_the_last_one() -> None:
    work = Work()
    trims = trimmer(work)
    assert not trims.check(), "nothing happened since it was made"
    work.done = 3
    assert trims.check()
    assert not trims.check(), "nothing happened since the last trim"
    assert work.released == 1


def test_no_trim_while_work_is_in_progress() -> None:
    work = Work()
    trims = trimmer(work)
    work.done, work.running = 1, True
    assert not trims.check()
    work.running = False
    assert trims.check()
    assert work.released == 1


def test_an_interval_of_zero_starts_no_thread() -> None:
    trims = trimmer(Work())
    trims.start(threading.Event())
    assert not [t for t in threading.enumerate() if t.name == "capa-malloc-trim"]


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@glibc_only
def test_trim_hands_freed_memory_back_to_the_system() -> None:
    # A burst of malloc'd blocks (bytes objects above pymalloc's 512-byte limit) on a thread, then freed:
    # glibc keeps the pages until trimmed.
    blocks: list[bytes] = []

    def burst() -> None:
        blocks.extend(os.urandom(1) * 2000 + bytes([i % 256]) for i in range(40_000))

    thread = threading.Thread(target=burst)
    thread.start()
    thread.join()
    keep = blocks[-1:]  # the arena's top stays in use, so nothing is returned before the trim
    blocks.clear()
    before = _rss_kib()
    assert allocator.trim()
    after = _rss_kib()
    assert before - after > 40_000, f"RSS {before} KiB before the trim, {after} KiB after"
    assert keep


@glibc_only
def test_arena_limit_applies_unless_the_environment_sets_it() -> None:
    # In a fresh interpreter: mallopt must come before threads make arenas.
    code = "from capa_py.runtime.allocator import limit_arenas; print(limit_arenas(2))"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "True"
    env["MALLOC_ARENA_MAX"] = "4"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False", "the environment's setting wins"
    with pytest.raises(ValueError, match="arenas"):
        allocator.limit_arenas(0)
