"""Workflow combinators, actions and hooks behave as the CtrlKit RFC describes (and capa-py extends).

Nothing here asserts on elapsed time: concurrency is proven with barriers and events, and the short
timeouts only decide which branch a Timeout takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capa_py.ctrlkit import (
    NOP,
    Action,
    ActionTimeout,
    Cancelled,
    Context,
    FuncAction,
    If,
    IfElse,
    Join,
    JoinOrdered,
    MultiError,
    Nop,
    ParallelJoin,
    Result,
    Retry,
    Sequential,
    Shared,
    StatefulAction,
    Timeout,
    action,
    exit_workflow,
    optimize,
    requeue_after,
    requeue_immediately,
    wrap_action,
)

# Only ever waited on to turn a hang into a failure; never expected to elapse.
SAFETY_TIMEOUT = 10.0


def step(log: list[str], name: str, result: Result | None = None) -> Action:
    """A leaf that records that it ran and returns ``result``."""

    def run(ctx: Context) -> Result | None:
        log.append(name)
        return result

    return FuncAction(name, run)


def failing(name: str, error: Exception) -> Action:
    def run(ctx: Context) -> Result | None:
        raise error

    return FuncAction(name, run)


def flat_errors(result: Result) -> tuple[Exception, ...]:
    if result.error is None:
        return ()
    return result.error.errors if isinstance(result.error, MultiError) else (result.error,)


# -- leaves --------------------------------------------------------------------------------------------


def test_an_exception_inside_an_action_becomes_an_error_result() -> None:
    error = RuntimeError("boom")
    result = failing("explodes", error).run()
    assert result.error is error, "the raised exception must be the result's error"


def test_an_action_returning_none_means_no_effect() -> None:
    assert step([], "quiet").run() == Result()


def test_wrap_action_and_the_decorator_make_leaf_actions() -> None:
    wrapped = wrap_action("wrapped", lambda ctx: requeue_immediately())

    @action("decorated")
    def decorated(ctx: Context) -> Result:
        return requeue_after(3)

    assert (wrapped.description, wrapped.run().requeue) == ("wrapped", True)
    assert (decorated.description, decorated.run().requeue_after) == ("decorated", 3)


def test_nop_does_nothing_and_never_interrupts() -> None:
    assert Nop().run() == Result()
    assert not NOP.run().interrupts
    assert isinstance(NOP, Nop)


def test_the_base_action_requires_act() -> None:
    result = Action().run()
    assert isinstance(result.error, NotImplementedError)


# -- Sequential ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "interrupting",
    [Result(error=ValueError("boom")), requeue_immediately(), requeue_after(5), exit_workflow()],
    ids=["error", "requeue", "requeue-after", "exit"],
)
def test_sequential_stops_at_the_first_interrupting_result_and_returns_it(interrupting: Result) -> None:
    log: list[str] = []
    flow = Sequential(step(log, "a"), step(log, "b", interrupting), step(log, "c"))

    result = flow.run()

    assert log == ["a", "b"], "actions after an interruption must not run"
    assert result is interrupting, "the interrupting result must be returned as is"


def test_sequential_stops_at_a_raised_exception() -> None:
    log: list[str] = []
    error = RuntimeError("boom")
    result = Sequential(step(log, "a"), failing("b", error), step(log, "c")).run()
    assert log == ["a"]
    assert result.error is error


def test_sequential_runs_everything_when_nothing_interrupts() -> None:
    log: list[str] = []
    result = Sequential(step(log, "a"), step(log, "b", Result()), step(log, "c")).run()
    assert log == ["a", "b", "c"]
    assert result == Result()


def test_an_empty_sequential_does_nothing() -> None:
    assert Sequential().run() == Result()


# -- Join, JoinOrdered, ParallelJoin -------------------------------------------------------------------


@pytest.mark.parametrize("group", [Join, JoinOrdered, ParallelJoin])
def test_join_runs_every_action_and_joins_the_results(group: type[Join]) -> None:
    log: list[str] = []
    first, second = ValueError("first"), KeyError("second")
    flow = group(
        step(log, "a", Result(error=first, requeue_after=30)),
        step(log, "b", requeue_immediately()),
        step(log, "c", Result(error=second, requeue_after=5)),
        step(log, "d"),
    )

    result = flow.run()

    assert sorted(log) == ["a", "b", "c", "d"], "a join must run every action, interrupting or not"
    assert result.requeue is True, "requeue flags are OR-ed"
    assert result.requeue_after == 5, "the shortest non-zero delay wins"
    assert flat_errors(result) == (first, second), "errors are joined in declaration order"


def test_join_ordered_runs_in_declaration_order() -> None:
    log: list[str] = []
    JoinOrdered(*(step(log, name) for name in "edcba")).run()
    assert log == list("edcba")


def test_parallel_join_really_runs_its_actions_concurrently() -> None:
    size = 4
    barrier = threading.Barrier(size)

    def meet(ctx: Context) -> Result:
        # Only passes once all `size` actions are inside at the same time.
        barrier.wait(SAFETY_TIMEOUT)
        return Result()

    result = ParallelJoin(*(FuncAction(f"meet-{i}", meet) for i in range(size))).run()

    assert result == Result(), f"the actions did not all run at once: {result}"


def test_parallel_join_joins_in_declaration_order_whatever_finishes_first() -> None:
    second_done = threading.Event()
    late, early = ValueError("declared first, finishes last"), KeyError("declared second, finishes first")

    def slow(ctx: Context) -> Result:
        assert second_done.wait(SAFETY_TIMEOUT)
        return Result(error=late)

    def fast(ctx: Context) -> Result:
        second_done.set()
        return Result(error=early)

    result = ParallelJoin(FuncAction("slow", slow), FuncAction("fast", fast)).run()

    assert flat_errors(result) == (late, early)


def test_an_empty_parallel_join_does_nothing() -> None:
    assert ParallelJoin().run() == Result()


def test_group_descriptions_name_their_members() -> None:
    log: list[str] = []
    assert Sequential(step(log, "a"), Join(step(log, "b"))).description == "Sequential(a, Join(b))"


# -- Timeout -------------------------------------------------------------------------------------------


def test_timeout_returns_the_result_of_an_action_that_finishes_in_time() -> None:
    result = Timeout(SAFETY_TIMEOUT, wrap_action("quick", lambda ctx: requeue_after(7))).run()
    assert result.requeue_after == 7


def test_timeout_returns_action_timeout_and_stops_a_cooperative_action() -> None:
    stopped = threading.Event()
    seen: list[BaseException] = []

    def cooperative(ctx: Context) -> Result:
        try:
            while True:
                ctx.check_cancelled()
                stopped.wait(0.01)
        except Cancelled as exc:
            seen.append(exc)
            raise
        finally:
            stopped.set()

    result = Timeout(0.05, FuncAction("cooperative", cooperative)).run()

    assert isinstance(result.error, ActionTimeout), f"expected ActionTimeout, got {result}"
    assert result.error.description == "cooperative"
    assert result.error.seconds == 0.05
    assert stopped.wait(SAFETY_TIMEOUT), "a cooperative action must stop at its next check"
    assert seen, "the action must have seen Cancelled"


def test_a_cooperative_sleep_wakes_when_the_timeout_cancels_it() -> None:
    woke = threading.Event()

    def sleeper(ctx: Context) -> Result:
        try:
            ctx.sleep(3600)
        finally:
            woke.set()
        return Result()

    result = Timeout(0.05, FuncAction("sleeper", sleeper)).run()

    assert isinstance(result.error, ActionTimeout)
    assert woke.wait(SAFETY_TIMEOUT), "ctx.sleep must wake up on cancellation, not sleep an hour"


def test_a_non_cooperative_action_runs_on_and_its_result_is_discarded() -> None:
    release, finished = threading.Event(), threading.Event()
    side_effects: list[str] = []

    def stubborn(ctx: Context) -> Result:
        release.wait(SAFETY_TIMEOUT)  # ignores ctx entirely
        side_effects.append("done")
        finished.set()
        return requeue_immediately()

    result = Timeout(0.05, FuncAction("stubborn", stubborn)).run()
    assert isinstance(result.error, ActionTimeout), "Timeout must return without waiting for the action"
    assert not result.requeue, "the late result must not leak into the timeout's result"

    release.set()
    assert finished.wait(SAFETY_TIMEOUT), "the abandoned action must still run to completion"
    assert side_effects == ["done"], "its side effects happen even though its result is discarded"


def test_timeout_needs_a_positive_duration() -> None:
    with pytest.raises(ValueError, match="positive"):
        Timeout(0, NOP)


# -- If / IfElse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("condition", [True, False])
def test_if_with_a_fixed_condition(condition: bool) -> None:
    log: list[str] = []
    result = If(condition, step(log, "a", requeue_immediately())).run()
    assert log == (["a"] if condition else [])
    assert result.requeue is condition, "a false condition has no effect"


def test_if_evaluates_a_callable_condition_on_every_run() -> None:
    log: list[str] = []
    flag = {"on": False}
    seen_contexts: list[Context] = []

    def enabled(ctx: Context) -> bool:
        seen_contexts.append(ctx)
        return flag["on"]

    conditional = If(enabled, step(log, "a"))
    conditional.run()
    flag["on"] = True
    ctx = Context()
    conditional.run(ctx)

    assert log == ["a"], "the condition must be evaluated when the workflow runs, not when it is built"
    assert seen_contexts[-1] is ctx, "the condition receives the run's context"
    assert conditional.description == "If(enabled, a)"


@pytest.mark.parametrize("condition", [True, False, lambda ctx: True, lambda ctx: False])
def test_if_else_runs_exactly_one_branch(condition: bool | Callable[[Context], bool]) -> None:
    log: list[str] = []
    IfElse(condition, step(log, "then"), step(log, "otherwise")).run()
    expected = condition(Context()) if callable(condition) else condition
    assert log == (["then"] if expected else ["otherwise"])


def test_a_failing_condition_becomes_an_error_result() -> None:
    error = LookupError("cannot decide")

    def broken(ctx: Context) -> bool:
        raise error

    log: list[str] = []
    assert If(broken, step(log, "a")).run().error is error
    assert log == []


# -- Shared --------------------------------------------------------------------------------------------


def test_shared_runs_once_across_threads_and_every_caller_gets_the_same_result() -> None:
    runs: list[str] = []
    callers = 8
    start = threading.Barrier(callers)

    def expensive(ctx: Context) -> Result:
        runs.append(threading.current_thread().name)
        return requeue_after(9)

    shared = Shared(FuncAction("expensive", expensive))
    results: list[Result] = []
    lock = threading.Lock()

    def call() -> None:
        start.wait(SAFETY_TIMEOUT)
        result = shared.run()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SAFETY_TIMEOUT)

    assert len(runs) == 1, f"the shared action ran {len(runs)} times"
    assert len(results) == callers
    assert all(r is results[0] for r in results), "every caller must get the one result"
    assert results[0].requeue_after == 9


def test_shared_inside_a_workflow_runs_once() -> None:
    log: list[str] = []
    shared = Shared(step(log, "once", requeue_immediately()))
    result = Join(shared, Sequential(NOP, shared), ParallelJoin(shared, shared)).run()
    assert log == ["once"]
    assert result.requeue


def test_shared_reset_runs_again() -> None:
    log: list[str] = []
    shared = Shared(step(log, "a"))
    shared.run()
    shared.reset()
    shared.run()
    assert log == ["a", "a"]


# -- Retry ---------------------------------------------------------------------------------------------


def flaky(log: list[str], failures: int, final: Result | None = None) -> Action:
    def run(ctx: Context) -> Result | None:
        log.append("try")
        if len(log) <= failures:
            raise ConnectionError(f"failure {len(log)}")
        return final

    return FuncAction("flaky", run)


def test_retry_retries_errors_until_success() -> None:
    log: list[str] = []
    result = Retry(flaky(log, failures=2), attempts=3, interval=0).run()
    assert log == ["try"] * 3
    assert result == Result()


def test_retry_gives_up_after_its_attempts_with_the_last_error() -> None:
    log: list[str] = []
    result = Retry(flaky(log, failures=5), attempts=3, interval=0).run()
    assert log == ["try"] * 3, "no more than `attempts` runs"
    assert isinstance(result.error, ConnectionError)
    assert str(result.error) == "failure 3", "the last attempt's error is returned"


def test_retry_does_not_retry_an_exit() -> None:
    log: list[str] = []
    result = Retry(step(log, "exit", exit_workflow()), attempts=5, interval=0).run()
    assert log == ["exit"], "an ExitWorkflow is a decision, not a failure"
    assert result.is_exit


def test_retry_does_not_retry_a_requeue() -> None:
    log: list[str] = []
    result = Retry(step(log, "later", requeue_after(3)), attempts=5, interval=0).run()
    assert log == ["later"]
    assert result.requeue_after == 3


def test_retry_needs_an_attempt() -> None:
    with pytest.raises(ValueError, match="at least one attempt"):
        Retry(NOP, attempts=0)


# -- hooks ---------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def before_action(self, action: Action, states: Mapping[str, Any]) -> None:
        self.calls.append(("before", action, dict(states)))

    def after_action(self, action: Action, states: Mapping[str, Any], result: Result) -> None:
        self.calls.append(("after", action, dict(states), result))


class Broken:
    def before_action(self, action: Action, states: Mapping[str, Any]) -> None:
        raise RuntimeError("hook broken before")

    def after_action(self, action: Action, states: Mapping[str, Any], result: Result) -> None:
        raise RuntimeError("hook broken after")


def test_hooks_see_the_action_its_states_and_its_result() -> None:
    recorder = Recorder()
    outcome = requeue_after(4)
    leaf = StatefulAction("leaf", {"answer": lambda: 42}, lambda ctx, states: outcome)

    result = leaf.run(Context(hooks=[recorder]))

    assert result is outcome
    assert recorder.calls == [("before", leaf, {"answer": 42}), ("after", leaf, {"answer": 42}, outcome)]


def test_hooks_wrap_every_action_of_a_workflow_in_order() -> None:
    recorder = Recorder()
    log: list[str] = []
    a, b = step(log, "a"), step(log, "b")
    flow = Sequential(a, b)

    flow.run(Context(hooks=[recorder]))

    assert [(call[0], call[1]) for call in recorder.calls] == [
        ("before", flow),
        ("before", a),
        ("after", a),
        ("before", b),
        ("after", b),
        ("after", flow),
    ]


def test_an_actions_own_hooks_run_with_the_contexts_hooks() -> None:
    context_hook, own_hook = Recorder(), Recorder()
    leaf = FuncAction("leaf", lambda ctx: None, hooks=[own_hook])
    leaf.run(Context(hooks=[context_hook]))
    assert [c[0] for c in context_hook.calls] == ["before", "after"]
    assert [c[0] for c in own_hook.calls] == ["before", "after"]


def test_a_failing_hook_does_not_change_the_outcome() -> None:
    recorder = Recorder()
    log: list[str] = []
    outcome = requeue_immediately()

    result = step(log, "a", outcome).run(Context(hooks=[Broken(), recorder]))

    assert result is outcome, "a broken hook must not change the action's result"
    assert log == ["a"], "a broken hook must not stop the action"
    assert [c[0] for c in recorder.calls] == ["before", "after"], "the other hooks must still run"


# -- StatefulAction ------------------------------------------------------------------------------------


def test_stateful_action_passes_its_fetched_states() -> None:
    seen: list[Mapping[str, Any]] = []
    leaf = StatefulAction(
        "leaf", {"a": lambda: 1, "b": lambda: "two"}, lambda ctx, states: seen.append(states) or None
    )
    assert leaf.run() == Result()
    assert seen == [{"a": 1, "b": "two"}]


def test_a_state_fetch_error_requeues_without_acting() -> None:
    acted: list[str] = []
    recorder = Recorder()
    error = TimeoutError("store unavailable")

    def unavailable() -> Any:
        raise error

    leaf = StatefulAction("leaf", {"cluster": unavailable}, lambda ctx, states: acted.append("acted") or None)
    result = leaf.run(Context(hooks=[recorder]))

    assert result.error is error, "the fetch error must be the result (requeue with backoff)"
    assert result.interrupts
    assert acted == [], "the action must not run without its states"
    assert recorder.calls == [], "hooks wrap the work, which never started"


# -- optimize ------------------------------------------------------------------------------------------


def leaves(*names: str) -> list[Action]:
    log: list[str] = []
    return [step(log, name) for name in names]


def test_optimize_flattens_nested_groups_of_the_same_kind() -> None:
    a, b, c, d = leaves("a", "b", "c", "d")
    optimized = optimize(Sequential(a, Sequential(b, Sequential(c)), d))
    assert isinstance(optimized, Sequential)
    assert optimized.children() == (a, b, c, d)

    joined = optimize(Join(a, Join(b, c), Join(d)))
    assert isinstance(joined, Join)
    assert joined.children() == (a, b, c, d)


def test_optimize_keeps_groups_of_other_kinds_nested() -> None:
    a, b, c = leaves("a", "b", "c")
    optimized = optimize(Sequential(a, Join(b, c)))
    assert isinstance(optimized, Sequential)
    assert optimized.children()[0] is a
    inner = optimized.children()[1]
    assert type(inner) is Join, "a Join inside a Sequential must stay a Join"
    assert inner.children() == (b, c)

    mixed = optimize(Join(a, JoinOrdered(b, c)))
    assert type(mixed.children()[1]) is JoinOrdered, "a JoinOrdered must not melt into an unordered Join"


def test_optimize_keeps_join_ordered_order() -> None:
    a, b, c, d, e = leaves("a", "b", "c", "d", "e")
    optimized = optimize(JoinOrdered(e, JoinOrdered(d, NOP, c), b, JoinOrdered(a)))
    assert isinstance(optimized, JoinOrdered)
    assert optimized.children() == (e, d, c, b, a)


def test_optimize_drops_nops_and_unwraps_singletons() -> None:
    (a,) = leaves("a")
    assert optimize(Sequential(NOP, a, Nop())) is a
    assert optimize(Join(Sequential(a))) is a
    assert isinstance(optimize(Sequential(NOP, Join(NOP))), Nop), "a group of nothing is a Nop"
    assert isinstance(optimize(Sequential()), Nop)


def test_optimize_folds_constant_conditions() -> None:
    a, b = leaves("a", "b")
    assert optimize(If(True, a)) is a
    assert isinstance(optimize(If(False, a)), Nop)
    assert isinstance(optimize(If(lambda ctx: True, NOP)), Nop), "a condition guarding nothing goes"
    assert optimize(IfElse(True, a, b)) is a
    assert optimize(IfElse(False, a, b)) is b
    assert optimize(Sequential(If(False, a), b)) is b


def test_optimize_keeps_callable_conditions() -> None:
    a, b = leaves("a", "b")

    def decide(ctx: Context) -> bool:
        return True

    kept = optimize(If(decide, Sequential(a)))
    assert isinstance(kept, If)
    assert kept.condition is decide
    assert kept.action is a, "the guarded action is optimised too"
    both = optimize(IfElse(decide, Join(a), Join(b)))
    assert isinstance(both, IfElse)
    assert (both.then, both.otherwise) == (a, b)


def test_optimize_keeps_shared_identity() -> None:
    (a,) = leaves("a")
    shared = Shared(Sequential(a))
    assert optimize(shared) is shared
    optimized = optimize(Join(shared, Join(shared, NOP)))
    assert optimized.children() == (shared, shared)
    assert all(child is shared for child in optimized.children()), "sharing is the Shared's identity"


def test_optimize_goes_inside_timeout_retry_and_parallel_join() -> None:
    a, b = leaves("a", "b")
    timeout = optimize(Timeout(5, Sequential(a)))
    assert isinstance(timeout, Timeout)
    assert (timeout.seconds, timeout.action) == (5, a)
    retry = optimize(Retry(Join(a), attempts=4, interval=2))
    assert isinstance(retry, Retry)
    assert (retry.action, retry.attempts, retry.interval) == (a, 4, 2)
    assert isinstance(optimize(Timeout(5, NOP)), Nop)
    assert isinstance(optimize(Retry(NOP)), Nop)
    parallel = optimize(ParallelJoin(Sequential(a), NOP, b, max_workers=2))
    assert isinstance(parallel, ParallelJoin)
    assert (parallel.children(), parallel.max_workers) == ((a, b), 2)


# -- optimize keeps behaviour: a property over random workflows ----------------------------------------


def workflows(log: list[str]) -> st.SearchStrategy[Action]:
    outcomes = st.sampled_from(["ok", "error", "requeue", "after-1", "after-5", "exit"])

    def leaf(spec: tuple[int, str]) -> Action:
        index, outcome = spec
        name = f"leaf-{index}-{outcome}"
        result = {
            "ok": None,
            "error": Result(error=ValueError(name)),
            "requeue": requeue_immediately(),
            "after-1": requeue_after(1),
            "after-5": requeue_after(5),
            "exit": exit_workflow(name),
        }[outcome]
        return step(log, name, result)

    leaves_ = st.tuples(st.integers(0, 99), outcomes).map(leaf) | st.just(NOP)

    def extend(children: st.SearchStrategy[Action]) -> st.SearchStrategy[Action]:
        groups = st.lists(children, max_size=4)
        return st.one_of(
            groups.map(lambda members: Sequential(*members)),
            groups.map(lambda members: Join(*members)),
            groups.map(lambda members: JoinOrdered(*members)),
            st.tuples(st.booleans(), children).map(lambda pair: If(pair[0], pair[1])),
            st.tuples(st.booleans(), children, children).map(lambda t: IfElse(t[0], t[1], t[2])),
        )

    return st.recursive(leaves_, extend, max_leaves=12)


@given(data=st.data())
def test_optimize_changes_neither_the_outcome_nor_the_order_of_work(data: st.DataObject) -> None:
    log: list[str] = []
    workflow = data.draw(workflows(log))

    original = workflow.run()
    original_log = list(log)
    log.clear()
    optimized = optimize(workflow).run()

    assert log == original_log, f"optimised workflow ran {log}, original ran {original_log}"
    assert (optimized.requeue, optimized.requeue_after, flat_errors(optimized)) == (
        original.requeue,
        original.requeue_after,
        flat_errors(original),
    ), f"optimised result {optimized} differs from the original {original}"
