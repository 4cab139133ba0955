"""While a NAT gateway, the API server load balancer or an instance is still pending, the controllers say
so in a Waiting condition, ask to be requeued, never create it a second time, and carry on once AWS
reports it available, active or running.

moto makes all three ready at once; :mod:`tests.controllers.pending` holds them pending in the answers
the controllers receive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.conditions import get_condition
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result
from capa_py.runtime.queue import ObjectKey
from controllers.services.instances import INSTANCE_READY
from controllers.services.loadbalancer import LOAD_BALANCER_READY
from controllers.services.network import NAT_GATEWAYS_READY
from tests.controllers.conftest import Harness
from tests.controllers.pending import PendingStates, passes_until, reconcile_pass

CLUSTER = ObjectKey("AWSCluster", "default", "demo")
MACHINES = ("demo-control-plane-0", "demo-worker-0", "demo-worker-1")
MAX_PASSES = 6


def _start(harness: Harness, example: Callable[[], list[KubeObject]], kind: str) -> tuple[PendingStates, Any]:
    harness.apply(example())
    pending = PendingStates(harness.aws, [kind])
    pending.hold(kind)
    return pending, harness.controllers()


def _condition(obj: AWSCluster | AWSMachine, condition_type: str) -> tuple[str, str]:
    condition = get_condition(obj.status, condition_type)
    assert condition is not None, f"{obj.ref()} has no {condition_type} condition: {obj.status.conditions}"
    return condition.status, condition.reason or ""


def _message(obj: AWSCluster | AWSMachine, condition_type: str) -> str:
    condition = get_condition(obj.status, condition_type)
    return condition.message or "" if condition is not None else ""


def _awscluster(harness: Harness) -> AWSCluster:
    return harness.store.get(AWSCluster, "demo", "default")


def _awsmachine(harness: Harness, name: str) -> AWSMachine:
    return harness.store.get(AWSMachine, name, "default")


def _passes_until(
    harness: Harness, controllers: Sequence[Any], done: Callable[[], bool], what: str
) -> dict[ObjectKey, Result]:
    """Reconcile pass after pass until ``done()``; fails naming ``what`` if it never happens."""
    return passes_until(controllers, harness.store, done, what, lambda: _conditions(harness), MAX_PASSES)


def _conditions(harness: Harness) -> str:
    """Every AWSCluster's and AWSMachine's conditions, one line each (for failure messages)."""
    objects = [*harness.store.list(AWSCluster), *harness.store.list(AWSMachine)]
    return "; ".join(
        f"{o.KIND}/{o.name}: "
        + ", ".join(
            f"{c.type}={c.status}{'(' + c.reason + ')' if c.reason else ''}" for c in o.status.conditions
        )
        for o in objects
    )


def _waiting(harness: Harness, condition_type: str, name: str | None = None) -> bool:
    obj = _awscluster(harness) if name is None else _awsmachine(harness, name)
    condition = get_condition(obj.status, condition_type)
    return condition is not None and condition.status == "False" and condition.reason == "Waiting"


def _asks_for_requeue(result: Result) -> bool:
    return result.error is None and (result.requeue or result.requeue_after > 0)


def _instances(harness: Harness) -> list[str]:
    reservations = harness.aws.ec2.raw.describe_instances()["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def test_cluster_requeues_while_nat_gateways_are_pending_and_creates_each_once(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, "nat-gateway")

    results = _passes_until(
        harness, controllers, lambda: _waiting(harness, NAT_GATEWAYS_READY), "waiting for NAT gateways"
    )
    for _ in range(2):
        assert _asks_for_requeue(results[CLUSTER]), results[CLUSTER]
        awscluster = _awscluster(harness)
        assert _condition(awscluster, NAT_GATEWAYS_READY) == ("False", "Waiting")
        assert "not available yet" in _message(awscluster, NAT_GATEWAYS_READY)
        assert not awscluster.status.ready, "ready while its NAT gateways are pending"
        results = reconcile_pass(controllers, harness.store)
    assert pending.creates["nat-gateway"] == 3, "one NAT gateway per zone, each created once"
    assert pending.rewritten["nat-gateway"] > 0
    # Machines need the subnets and security groups, not the NAT gateways: they launch meanwhile, once each.
    assert len(_instances(harness)) == 3, "machines wait for NAT gateways they do not need"

    pending.release("nat-gateway")
    _passes_until(harness, controllers, lambda: _awscluster(harness).status.ready, "cluster ready")
    awscluster = _awscluster(harness)
    assert _condition(awscluster, NAT_GATEWAYS_READY) == ("True", "")
    assert pending.creates["nat-gateway"] == 3, "a NAT gateway was created again once it became available"
    nat_ids = {s.nat_gateway_id for s in awscluster.status.network.subnets if s.is_public}
    assert len(nat_ids) == 3
    assert None not in nat_ids


def test_cluster_requeues_while_the_load_balancer_is_provisioning_and_creates_it_once(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, "load-balancer")

    results = _passes_until(
        harness, controllers, lambda: _waiting(harness, LOAD_BALANCER_READY), "waiting for the load balancer"
    )
    for _ in range(2):
        assert _asks_for_requeue(results[CLUSTER]), results[CLUSTER]
        awscluster = _awscluster(harness)
        assert _condition(awscluster, LOAD_BALANCER_READY) == ("False", "Waiting")
        assert "provisioning" in _message(awscluster, LOAD_BALANCER_READY)
        assert not awscluster.status.ready, "ready while its load balancer is provisioning"
        assert not awscluster.spec.control_plane_endpoint.is_set, (
            "endpoint set before the load balancer is active"
        )
        results = reconcile_pass(controllers, harness.store)
    assert pending.creates["load-balancer"] == 1
    assert pending.rewritten["load-balancer"] > 0
    # Machines need the target group's ARN, not an active load balancer: they launch meanwhile, once each.
    assert len(_instances(harness)) == 3, "machines wait for a load balancer they do not need"

    pending.release("load-balancer")
    _passes_until(harness, controllers, lambda: _awscluster(harness).status.ready, "cluster ready")
    awscluster = _awscluster(harness)
    assert _condition(awscluster, LOAD_BALANCER_READY) == ("True", "")
    assert awscluster.spec.control_plane_endpoint.is_set
    assert pending.creates["load-balancer"] == 1, "the load balancer was created again once it became active"


def test_machines_requeue_while_their_instances_are_pending_and_launch_each_once(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, "instance")

    def all_waiting() -> bool:
        return all(_waiting(harness, INSTANCE_READY, name) for name in MACHINES)

    results = _passes_until(harness, controllers, all_waiting, "machines waiting for their instances")
    for _ in range(2):
        for name in MACHINES:
            key = ObjectKey("AWSMachine", "default", name)
            assert _asks_for_requeue(results[key]), (name, results[key])
            awsmachine = _awsmachine(harness, name)
            assert _condition(awsmachine, INSTANCE_READY) == ("False", "Waiting")
            assert awsmachine.status.instance_state == "pending"
            assert not awsmachine.status.ready, f"{name} ready while its instance is pending"
        results = reconcile_pass(controllers, harness.store)
    assert pending.creates["instance"] == 3, "each machine's instance launched once"
    assert len(_instances(harness)) == 3

    pending.release("instance")

    def all_ready() -> bool:
        return all(_awsmachine(harness, name).status.ready for name in MACHINES)

    _passes_until(harness, controllers, all_ready, "machines ready")
    for name in MACHINES:
        awsmachine = _awsmachine(harness, name)
        assert _condition(awsmachine, INSTANCE_READY) == ("True", "")
        assert awsmachine.status.instance_state == "running"
    assert pending.creates["instance"] == 3, "an instance was launched again once it was running"
    assert len(_instances(harness)) == 3
