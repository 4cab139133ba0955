"""The shared observations' own rules: freshness, what amending and invalidating keep, births and their
window, facts computed once, and a disabled cache that remembers nothing."""

from __future__ import annotations

import threading
import time

from capa_py.aws.observations import BORN_WINDOW, MISS, Observations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_observation_is_served_while_fresh_and_as_a_copy() -> None:
    clock = Clock()
    observations = Observations(clock=clock)
    observations.put("vpc", "vpc-1", {"tags": {"a": "1"}}, ttl=60)
    served = observations.get("vpc", "vpc-1")
    served["tags"]["a"] = "changed"
    assert observations.get("vpc", "vpc-1") == {"tags": {"a": "1"}}
    clock.now += 30
    assert observations.stale("vpc") == []
    clock.now += 0.5  # past half its freshness: a refresh of the kind renews it too
    assert observations.stale("vpc") == ["vpc-1"]
    clock.now += 29.5
    assert observations.get("vpc", "vpc-1") == {"tags": {"a": "1"}}
    clock.now += 0.5
    assert observations.get("vpc", "vpc-1") is MISS


def test_amending_keeps_the_age_and_invalidating_keeps_the_id_known() -> None:
    clock = Clock()
    observations = Observations(clock=clock)
    observations.put("subnet", "subnet-1", {"public": False}, ttl=60)
    clock.now += 50
    observations.amend("subnet", "subnet-1", {"public": True}, ttl=60)
    assert observations.get("subnet", "subnet-1") == {"public": True}
    clock.now += 11  # 61 s after it was seen: an amendment made by us does not make it fresher
    assert observations.get("subnet", "subnet-1") is MISS
    observations.put("subnet", "subnet-2", {}, ttl=60)
    observations.invalidate("subnet", "subnet-2")
    assert observations.get("subnet", "subnet-2") is MISS
    assert observations.stale("subnet") == ["subnet-1", "subnet-2"]
    observations.forget("subnet", "subnet-1")
    assert observations.stale("subnet") == ["subnet-2"]


def test_births_last_a_window_and_children_are_found_by_parent() -> None:
    clock = Clock()
    observations = Observations(clock=clock)
    assert not observations.born_here("vpc-1")
    observations.born("vpc-1")
    observations.add_child("vpc-1", "subnet", "subnet-1", "vpc-1/10.0.0.0/20", {"id": "subnet-1"})
    assert observations.born_here("vpc-1")
    assert observations.children("vpc-1", "subnet") == [("vpc-1/10.0.0.0/20", {"id": "subnet-1"})]
    assert observations.children("vpc-1", "security-group") == []
    observations.forget("subnet", "subnet-1")
    assert observations.children("vpc-1", "subnet") == []
    clock.now += BORN_WINDOW + 1
    assert not observations.born_here("vpc-1")


def test_a_fact_is_computed_once_even_by_concurrent_readers() -> None:
    observations = Observations()
    computed: list[int] = []

    def compute() -> str:
        computed.append(1)
        time.sleep(0.05)
        return "/dev/xvda"

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(observations.fact(("ami", "x"), 60, compute)))
        for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["/dev/xvda"] * 5
    assert len(computed) == 1


def test_a_listing_learns_what_was_created_after_it() -> None:
    observations = Observations()
    listing = observations.fact(("tagged", "demo", "vpc", ""), 60, list)
    assert listing == []
    observations.extend_fact(("tagged", "demo", "vpc", ""), {"id": "vpc-1"})
    assert observations.fact(("tagged", "demo", "vpc", ""), 60, list) == [{"id": "vpc-1"}]
    observations.forget_facts(("tagged", "demo"))
    assert observations.fact(("tagged", "demo", "vpc", ""), 60, lambda: ["asked again"]) == ["asked again"]


def test_disabled_observations_remember_nothing() -> None:
    observations = Observations(enabled=False)
    observations.put("vpc", "vpc-1", {}, ttl=60)
    observations.born("vpc-1")
    assert observations.get("vpc", "vpc-1") is MISS
    assert not observations.born_here("vpc-1")
    calls: list[int] = []
    for _ in range(2):
        observations.fact("zones", 60, lambda: calls.append(1))
    assert len(calls) == 2


def test_a_doubted_birth_no_longer_answers_for_what_is_inside() -> None:
    observations = Observations()
    observations.born("subnet-1")
    observations.doubt("subnet-1")
    assert not observations.born_here("subnet-1")
    observations.doubt(None)  # nothing to doubt: no error
