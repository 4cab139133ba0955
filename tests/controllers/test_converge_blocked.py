"""``converge`` ends a wait as soon as every target not done is blocked, and says why (controllers.blocking).

The real controllers in-process on a real SQLite store; the blocking states are made for real: a closed
endpoint, a deletion by another writer, a Machine naming a Cluster that does not exist.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capa_py.api.cluster import Machine
from capa_py.api.meta import KubeObject
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSSettings, ClientPool
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.operations import apply_objects
from capa_py.runtime.manager import Manager, key_of
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.blocking import BEING_DELETED, CLUSTER_NOT_FOUND, ENDPOINT_UNREACHABLE, Blocked, find_blocked
from controllers.run import converge
from tests.controllers.conftest import FAST_RETRY, Harness

# Far beyond what any of these waits needs: a wait that runs into it failed the test.
TIMEOUT = 120.0


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: connections to it are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_every_target_waiting_on_an_unreachable_endpoint_ends_the_wait_with_the_reason(
    tmp_path: Path,
    closed_port: int,
    example: Callable[[], list[KubeObject]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = SQLiteStore(tmp_path / "state.db")
    pool = ClientPool(
        AWSSettings(region="us-east-1", endpoint_url=f"http://127.0.0.1:{closed_port}", retry=FAST_RETRY),
        limiter=RateLimiter(enabled=False),
    )
    targets = [a.object for a in apply_objects(store, example()) if a.object.KIND != "Secret"]
    result = converge(store, aws_controllers(store, pool, Engine(MOTO)), targets, timeout=TIMEOUT)
    store.close()

    assert not result.converged
    assert not result.timed_out, "the wait ran into its timeout instead of ending as blocked"
    assert set(result.blocked) == {t.ref() for t in targets}, result.blocked
    assert result.blocked["AWSCluster default/demo"].reason == ENDPOINT_UNREACHABLE, result.blocked
    assert "could not reach AWS" in result.blocked["AWSCluster default/demo"].message
    machine = result.blocked["Machine default/demo-worker-0"]
    assert machine.reason == ENDPOINT_UNREACHABLE, machine
    assert "waits on" in machine.message, machine


def test_targets_deleted_by_another_writer_end_the_wait_as_blocked(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    targets = [o for o in harness.apply(example()) if o.KIND != "Secret"]
    deleted: list[str] = []

    def delete_once(_: list[KubeObject | None]) -> None:
        if not deleted:
            for obj in reversed(targets):
                harness.store.delete(type(obj), obj.name, obj.namespace)
                deleted.append(obj.ref())

    result = converge(harness.store, harness.controllers(), targets, timeout=TIMEOUT, on_tick=delete_once)
    assert deleted, "the deletion never ran; the test is void"
    assert not result.converged
    assert not result.timed_out, "the wait ran into its timeout instead of ending as blocked"
    assert result.blocked, "a wait over deleted targets did not report them blocked"
    assert {b.reason for b in result.blocked.values()} <= {BEING_DELETED, "Deleted"}, result.blocked


def test_a_machine_naming_a_missing_cluster_blocks_with_the_core_controllers_condition(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    machine = next(o for o in example() if isinstance(o, Machine) and o.name == "demo-worker-0")
    machine.spec.cluster_name = "nowhere"
    [stored] = harness.apply([machine])

    result = harness.converge([stored], timeout=TIMEOUT)
    assert not result.timed_out, "the wait ran into its timeout instead of ending as blocked"
    blocked = result.blocked["Machine default/demo-worker-0"]
    assert blocked.reason == CLUSTER_NOT_FOUND, blocked
    assert blocked.message == "cluster default/nowhere (spec.clusterName) does not exist", blocked
    condition = next(
        c
        for c in harness.store.get(Machine, "demo-worker-0", "default").status.conditions
        if c.type == "Ready"
    )
    assert (condition.status, condition.reason) == ("False", CLUSTER_NOT_FOUND), condition


def test_a_failed_object_outside_the_targets_does_not_hold_back_a_converged_wait(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """A fatal failure is retried after a long back-off; that queued retry of an object the wait is not
    about must not keep the wait going until its timeout once every target is ready."""
    objects = example()
    broken = next(o for o in objects if o.KIND == "AWSMachine" and o.name == "demo-worker-1")
    broken.spec.ami.id = "ami-0000000000000dead"  # type: ignore[attr-defined]
    stored = harness.apply(objects)
    outside = {"Machine default/demo-worker-1", "AWSMachine default/demo-worker-1"}
    everything = [o for o in stored if o.KIND != "Secret"]
    converge(harness.store, harness.controllers(), everything, timeout=TIMEOUT)  # the worker fails
    failed = harness.store.get(type(broken), broken.name, broken.namespace)
    assert failed.status.failure_reason, "the broken machine never failed; the test is void"  # type: ignore[attr-defined]

    targets = [o for o in everything if o.ref() not in outside]
    result = converge(harness.store, harness.controllers(), targets, timeout=TIMEOUT)

    assert result.converged, result.states
    assert not result.timed_out, "the wait ran into its timeout: another object's retry held it back"


def test_a_reconciled_machine_is_judged_by_its_stored_condition_not_a_lagging_copy(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """The copy a wait holds comes from a watch and may predate the reconcile that wrote the condition: the
    reason given is the condition's all the same (it was once "waits on cluster/nowhere", by chance)."""
    machine = next(o for o in example() if isinstance(o, Machine) and o.name == "demo-worker-0")
    machine.spec.cluster_name = "nowhere"
    [stale] = harness.apply([machine])
    assert not stale.status.conditions, "the copy already has a condition; the test is void"  # type: ignore[attr-defined]
    harness.converge([stale], timeout=TIMEOUT)  # the core controller writes ClusterNotFound

    manager = Manager(harness.store, harness.controllers())
    manager.reconciled_keys.add(key_of(stale))
    found = find_blocked(harness.store, manager, [stale], [stale], "ready")

    assert found["Machine default/demo-worker-0"] == Blocked(
        CLUSTER_NOT_FOUND, "cluster default/nowhere (spec.clusterName) does not exist"
    ), found
