"""The polling helper, on a fake clock: what it returns, what it retries, and what its failure says."""

from __future__ import annotations

import gc
import weakref

import pytest

from tests.support.eventually import eventually, eventually_passes


class FakeClock:
    """A clock that moves only when the helper sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_it_returns_the_first_truthy_value_and_sleeps_between_tries() -> None:
    clock = FakeClock()
    values = iter([0, [], "", "ready", "later"])

    assert eventually(lambda: next(values), clock=clock, sleep=clock.sleep, interval=0.5) == "ready"
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_a_failed_assertion_or_an_ignored_exception_is_tried_again() -> None:
    clock = FakeClock()
    calls = [0]

    def probe() -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise ConnectionRefusedError("not listening yet")
        assert calls[0] > 2, "not yet"
        return calls[0]

    assert eventually(probe, ignoring=(OSError,), clock=clock, sleep=clock.sleep) == 3


def test_an_exception_it_does_not_ignore_goes_through_at_once() -> None:
    clock = FakeClock()

    def probe() -> bool:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        eventually(probe, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_after_the_timeout_it_names_what_it_waited_for_and_the_last_value() -> None:
    clock = FakeClock()
    values = iter(range(100))

    with pytest.raises(AssertionError, match=r"the counter: not within 1 s \(last value: 0\)") as caught:
        eventually(
            lambda: 0 * next(values), "the counter", timeout=1.0, interval=0.3, clock=clock, sleep=clock.sleep
        )
    assert caught.value.__cause__ is None
    assert clock.now == pytest.approx(1.0), "the last try is at the deadline, not past it"
    assert next(values) == 5, "tried at 0, 0.3, 0.6, 0.9 and at the deadline"


def test_after_the_timeout_it_shows_the_last_failure() -> None:
    clock = FakeClock()

    def check() -> None:
        assert clock.now > 10, f"only {clock.now:g}"

    with pytest.raises(
        AssertionError, match=r"check: not within 2 s \(last failure: AssertionError: only 2"
    ) as caught:
        eventually_passes(check, timeout=2.0, interval=1.0, clock=clock, sleep=clock.sleep)
    assert isinstance(caught.value.__cause__, AssertionError)


def test_eventually_passes_returns_once_the_check_holds() -> None:
    clock = FakeClock()

    def check() -> None:
        assert clock.now >= 1.0

    eventually_passes(check, interval=0.25, clock=clock, sleep=clock.sleep)
    assert clock.now == 1.0


def test_its_failure_carries_what_detail_says() -> None:
    clock = FakeClock()

    with pytest.raises(AssertionError, match=r"\(last value: None\)\nthe server's log") as caught:
        eventually(
            lambda: None,
            "a reply",
            timeout=1.0,
            detail=lambda: "the server's log",
            clock=clock,
            sleep=clock.sleep,
        )
    assert "a reply: not within 1 s" in str(caught.value)


def test_a_failure_it_tried_again_is_not_kept_alive() -> None:
    """Failed before: the helper kept the last exception, whose traceback holds the helper's own frame, in
    a reference cycle; what the failed try's frames held (an HTTP error's response, its socket) lived on
    until the garbage collector ran, and the unclosed socket warned in whichever test came next."""

    class Held:
        pass

    held: list[weakref.ref[Held]] = []

    def probe() -> bool:
        if not held:
            response = Held()
            held.append(weakref.ref(response))
            raise ConnectionResetError("reset")
        return True

    clock = FakeClock()
    gc.disable()
    try:
        assert eventually(probe, ignoring=(OSError,), clock=clock, sleep=clock.sleep)
        assert held[0]() is None, "freed as soon as the next try began, without the garbage collector"
    finally:
        gc.enable()
