"""Results and the CtrlKit rules of result join, pinned exhaustively and as algebraic properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capa_py.ctrlkit import (
    ExitWorkflow,
    MultiError,
    Result,
    exit_workflow,
    ignore_exit,
    join,
    no_requeue,
    requeue_after,
    requeue_if_error,
    requeue_immediately,
)


def flat_errors(result: Result) -> tuple[Exception, ...]:
    """The errors a result carries, in order (a MultiError counts as its members)."""
    if result.error is None:
        return ()
    if isinstance(result.error, MultiError):
        return result.error.errors
    return (result.error,)


def normal(result: Result) -> tuple[bool, float, tuple[Exception, ...]]:
    """A comparable form: two MultiErrors of the same errors are the same outcome."""
    return (result.requeue, result.requeue_after, flat_errors(result))


_counter = itertools.count()
errors = st.one_of(
    st.builds(lambda: ValueError(f"error-{next(_counter)}")),
    st.builds(lambda: ExitWorkflow(f"exit-{next(_counter)}")),
    st.builds(lambda: MultiError([RuntimeError(f"a-{next(_counter)}"), KeyError(f"b-{next(_counter)}")])),
)
delays = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 5.0, 30.0]), st.floats(min_value=0, max_value=1e6))
results = st.builds(Result, requeue=st.booleans(), requeue_after=delays, error=st.none() | errors)


# -- algebraic properties ------------------------------------------------------------------------------


@given(a=results, b=results, c=results)
def test_join_is_associative(a: Result, b: Result, c: Result) -> None:
    left = join(join(a, b), c)
    right = join(a, join(b, c))
    assert normal(left) == normal(right), "joining must not depend on grouping"
    assert normal(left) == normal(join(a, b, c)), "a variadic join must equal the nested joins"


@given(a=results)
def test_an_empty_result_is_the_identity_of_join(a: Result) -> None:
    assert join(a, Result()) == a, "x ⊕ nothing must be x (the same error object, not a wrapper)"
    assert join(Result(), a) == a
    assert join(a) == a
    assert join() == Result()


@given(a=results, b=results)
def test_join_follows_the_three_rules(a: Result, b: Result) -> None:
    joined = join(a, b)
    assert joined.requeue == (a.requeue or b.requeue), "requeue flags must be OR-ed"
    non_zero = [d for d in (a.requeue_after, b.requeue_after) if d > 0]
    assert joined.requeue_after == (min(non_zero) if non_zero else 0), "shortest non-zero delay, else 0"
    assert flat_errors(joined) == flat_errors(a) + flat_errors(b), "errors are kept, flattened, in order"


@given(a=results, b=results)
def test_join_interrupts_if_either_side_does(a: Result, b: Result) -> None:
    assert join(a, b).interrupts == (a.interrupts or b.interrupts)


@given(items=st.lists(results, max_size=6))
def test_join_of_many_keeps_every_error_in_order(items: list[Result]) -> None:
    joined = join(*items)
    assert flat_errors(joined) == tuple(e for r in items for e in flat_errors(r))


# -- the rules, case by case ---------------------------------------------------------------------------


def test_no_error_joined_with_an_error_is_that_error() -> None:
    error = ValueError("boom")
    assert join(Result(), Result(error=error)).error is error
    assert join(Result(error=error), Result()).error is error


def test_two_errors_make_a_multi_error_of_both() -> None:
    first, second = ValueError("first"), KeyError("second")
    joined = join(Result(error=first), Result(error=second))
    assert isinstance(joined.error, MultiError)
    assert joined.error.errors == (first, second)
    assert "ValueError: first" in str(joined.error)
    assert "KeyError: 'second'" in str(joined.error)


def test_multi_errors_are_flattened() -> None:
    a, b, c, d = (ValueError(name) for name in "abcd")
    joined = join(Result(error=MultiError([a, b])), Result(error=MultiError([c, MultiError([d])])))
    assert isinstance(joined.error, MultiError)
    assert joined.error.errors == (a, b, c, d), "nested MultiErrors must be flattened"


ERRORS = {"no error": None, "error": "error"}
TABLE = list(itertools.product(ERRORS, (False, True), (0.0, 1.0, 5.0)))


@pytest.mark.parametrize(
    ("left", "right"),
    list(itertools.product(TABLE, TABLE)),
    ids=lambda side: f"{side[0]}/requeue={side[1]}/after={side[2]:g}",
)
def test_join_table(left: tuple[str, bool, float], right: tuple[str, bool, float]) -> None:
    left_error = ValueError("left") if left[0] == "error" else None
    right_error = ValueError("right") if right[0] == "error" else None
    joined = join(
        Result(requeue=left[1], requeue_after=left[2], error=left_error),
        Result(requeue=right[1], requeue_after=right[2], error=right_error),
    )

    assert joined.requeue is (left[1] or right[1])
    delays = [d for d in (left[2], right[2]) if d]
    assert joined.requeue_after == (min(delays) if delays else 0.0)
    if left_error and right_error:
        assert isinstance(joined.error, MultiError)
        assert joined.error.errors == (left_error, right_error)
    else:
        assert joined.error is (left_error or right_error)


# -- the workflow interaction helpers ------------------------------------------------------------------


def test_requeue_immediately_interrupts_and_requeues() -> None:
    result = requeue_immediately()
    assert (result.requeue, result.requeue_after, result.error) == (True, 0.0, None)
    assert result.interrupts


def test_requeue_after_interrupts_with_a_delay() -> None:
    result = requeue_after(5)
    assert (result.requeue, result.requeue_after, result.error) == (False, 5, None)
    assert result.interrupts


@pytest.mark.parametrize("seconds", [0, -1])
def test_requeue_after_needs_a_positive_delay(seconds: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        requeue_after(seconds)


def test_requeue_if_error_interrupts_only_with_an_error() -> None:
    error = ValueError("boom")
    assert requeue_if_error(error).error is error
    assert requeue_if_error(error).interrupts
    assert requeue_if_error(None) == Result()
    assert not requeue_if_error(None).interrupts


def test_no_requeue_has_no_effect() -> None:
    assert no_requeue() == Result()
    assert not no_requeue().interrupts


def test_exit_workflow_interrupts_with_an_exit_error() -> None:
    result = exit_workflow("paused")
    assert isinstance(result.error, ExitWorkflow)
    assert result.is_exit
    assert result.interrupts, "an exit must stop a Sequential flow"
    assert str(result.error) == "paused"


# -- ignore_exit ---------------------------------------------------------------------------------------


def test_ignore_exit_drops_an_exit_and_keeps_the_requeue() -> None:
    result = ignore_exit(Result(requeue=True, requeue_after=3, error=ExitWorkflow()))
    assert result == Result(requeue=True, requeue_after=3)


def test_ignore_exit_keeps_other_errors() -> None:
    error = ValueError("boom")
    assert ignore_exit(Result(error=error)).error is error
    assert ignore_exit(Result()) == Result()


def test_ignore_exit_drops_exits_inside_a_multi_error() -> None:
    real = ValueError("real")
    single = ignore_exit(join(exit_workflow(), Result(error=real), exit_workflow()))
    assert single.error is real, "one remaining error must be returned as itself"

    other = KeyError("other")
    several = ignore_exit(join(Result(error=real), exit_workflow(), Result(error=other)))
    assert isinstance(several.error, MultiError)
    assert several.error.errors == (real, other)

    assert ignore_exit(join(exit_workflow("a"), exit_workflow("b"))).error is None, "only exits: no error"


@given(a=results, b=results)
def test_ignore_exit_removes_exactly_the_exits(a: Result, b: Result) -> None:
    joined = join(a, b)
    cleaned = ignore_exit(joined)
    assert flat_errors(cleaned) == tuple(e for e in flat_errors(joined) if not isinstance(e, ExitWorkflow))
    assert (cleaned.requeue, cleaned.requeue_after) == (joined.requeue, joined.requeue_after)


def test_result_reads_as_what_it_asks_for() -> None:
    assert str(Result()) == "done"
    assert str(Result(requeue=True, requeue_after=2.5, error=ValueError("x"))) == (
        "requeue, requeue after 2.5s, error: x"
    )
