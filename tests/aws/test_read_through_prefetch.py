"""A prefetch that waited for another reconcile's refresh of the same kind describes nothing again.

The five AWSCluster workers of a controller reconcile side by side at every resync: each prefetches the
recorded resources of the same kinds. Only one may ask AWS per kind; the others wait for it and then find
their ids fresh. The resource class here is a stand-in counting ``describe_many`` calls (the interleaving of
two threads around the refresh lock cannot be forced through a real endpoint); the observations and the
read-through front are the real ones.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from capa_py.aws.observations import Observations
from capa_py.cache.front import ReadThrough
from capa_py.engine.resource import Observed


class CountingSubnets:
    """The parts of a resource class a prefetch uses; ``describe_many`` blocks until released."""

    kind = "subnet"
    freshness = 60.0
    reads_within = None
    tracks_updates = False

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        self.calls.append(list(resource_ids))
        self.entered.set()
        assert self.release.wait(10)
        return {i: Observed(id=i, state="available") for i in resource_ids}

    def is_ready(self, observed: Observed) -> bool:
        return True


class SignallingObservations(Observations):
    """Observations that say when a caller starts waiting for a kind's refresh lock."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Semaphore(0)

    @contextmanager
    def refreshing(self, kind: str) -> Iterator[None]:
        self.waiting.release()
        with super().refreshing(kind):
            yield


def test_a_second_prefetch_of_the_same_ids_waits_and_describes_nothing() -> None:
    observations = SignallingObservations()
    rc = CountingSubnets()
    ids = ["subnet-1", "subnet-2", "subnet-3"]

    def prefetch() -> None:
        front: ReadThrough[Any] = ReadThrough(rc, observations)  # type: ignore[arg-type]
        front.prefetch(ids, unrecorded=0, cluster="demo", by_tags=True)

    first = threading.Thread(target=prefetch)
    first.start()
    assert rc.entered.wait(10)  # the first holds the lock and is describing
    assert observations.waiting.acquire(timeout=10)
    second = threading.Thread(target=prefetch)
    second.start()
    assert observations.waiting.acquire(timeout=10)  # the second decided its ids were due, and waits
    rc.release.set()
    first.join(10)
    second.join(10)
    assert rc.calls == [ids]
    front: ReadThrough[Any] = ReadThrough(rc, observations)  # type: ignore[arg-type]
    assert front.describe("subnet-2") == Observed(id="subnet-2", state="available")
    assert len(rc.calls) == 1
