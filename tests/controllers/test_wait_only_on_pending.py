"""A step waiting on AWS holds back only what depends on it, and polls only what is pending.

While NAT gateways are pending, one AWSCluster pass still creates the security groups and the load balancer,
and records the subnets, the groups and the target group in ``status.network``; machines launch then (they
need the subnets and groups, not a ready cluster), and the control-plane machine registers with the target
group while the load balancer provisions. A pass that only waits describes just the pending resources, once,
and asks to be requeued at the cadence of AWS's waiter (botocore's ``NatGatewayAvailable``,
``LoadBalancerAvailable``, ``InstanceRunning``: every 15 s); the first poll of a resource created in the
pass comes sooner. Nothing is created twice once AWS reports it ready.

:mod:`tests.controllers.pending` holds the resources pending; :func:`reconcile_pass` runs each controller
once, so requeues are read from the results, never waited for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.conditions import get_condition
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.ctrlkit.result import Result
from capa_py.runtime.queue import ObjectKey
from controllers import waits
from controllers.services.instances import INSTANCE_READY, LB_ATTACHED
from controllers.services.loadbalancer import LOAD_BALANCER_READY
from controllers.services.network import NAT_GATEWAYS_READY, ROUTE_TABLES_READY
from controllers.services.securitygroups import SECURITY_GROUPS_READY
from controllers.waits import (
    FIRST_POLL_AFTER_CREATE,
    INSTANCE_RUNNING,
    LOAD_BALANCER_AVAILABLE,
    MIN_POLL,
    NAT_GATEWAY_AVAILABLE,
    POLL_SHARE,
)
from tests.controllers.conftest import Harness
from tests.controllers.pending import PendingStates, passes_until, reconcile_pass

CLUSTER = ObjectKey("AWSCluster", "default", "demo")
CONTROL_PLANE = "demo-control-plane-0"
MACHINES = (CONTROL_PLANE, "demo-worker-0", "demo-worker-1")
MAX_PASSES = 6
WAITER_CADENCE = 15.0
"""What botocore's waiter models say for all three waiters (botocore 1.44)."""


def _start(
    harness: Harness, example: Callable[[], list[KubeObject]], held: Sequence[str]
) -> tuple[PendingStates, list[Any]]:
    harness.apply(example())
    pending = PendingStates(harness.aws, ["nat-gateway", "load-balancer", "instance"])
    for kind in held:
        pending.hold(kind)
    return pending, harness.controllers()


def _awscluster(harness: Harness) -> AWSCluster:
    return harness.store.get(AWSCluster, "demo", "default")


def _awsmachine(harness: Harness, name: str) -> AWSMachine:
    return harness.store.get(AWSMachine, name, "default")


def _condition(obj: AWSCluster | AWSMachine, condition_type: str) -> tuple[str, str]:
    condition = get_condition(obj.status, condition_type)
    return (condition.status, condition.reason or "") if condition is not None else ("absent", "")


def _describe(obj: AWSCluster | AWSMachine) -> str:
    return ", ".join(
        f"{c.type}={c.status}({c.reason or ''}: {c.message or ''})" for c in obj.status.conditions
    )


def _passes_until(
    harness: Harness, controllers: Sequence[Any], done: Callable[[], bool], what: str
) -> dict[ObjectKey, Result]:
    def explain() -> str:
        states = [_awscluster(harness), *(_awsmachine(harness, m) for m in MACHINES)]
        return "; ".join(f"{o.name}: {_describe(o)}" for o in states)

    return passes_until(controllers, harness.store, done, what, explain, MAX_PASSES)


def _instances(harness: Harness) -> dict[str, str]:
    """Instance id → the capa-py role tag (``instance-<machine>``), of every instance in the account."""
    reservations = harness.aws.ec2.raw.describe_instances()["Reservations"]
    return {
        i["InstanceId"]: next((t["Value"] for t in i.get("Tags", []) if t["Key"] == "Name"), "")
        for r in reservations
        for i in r["Instances"]
    }


def _nat_ids_asked(harness: Harness) -> list[list[str]]:
    """Collects, for every DescribeNatGateways from now on, the ids it asked for (by id or id filter)."""
    asked: list[list[str]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        ids = list(params.get("NatGatewayIds", []))
        for f in params.get("Filter", []) + params.get("Filters", []):
            if f.get("Name") == "nat-gateway-id":
                ids += f.get("Values", [])
        asked.append(sorted(ids))

    harness.aws.ec2.raw.meta.events.register("provide-client-params.ec2.DescribeNatGateways", record)
    return asked


def test_the_waiters_cadence_is_read_from_botocore() -> None:
    assert NAT_GATEWAY_AVAILABLE.cadence == WAITER_CADENCE
    assert LOAD_BALANCER_AVAILABLE.cadence == WAITER_CADENCE
    assert INSTANCE_RUNNING.cadence == WAITER_CADENCE
    # Without a creation time from AWS: the first look soon after a create, then the cadence.
    assert NAT_GATEWAY_AVAILABLE.requeue(created_this_pass=True) == min(
        FIRST_POLL_AFTER_CREATE, WAITER_CADENCE
    )
    assert NAT_GATEWAY_AVAILABLE.requeue(created_this_pass=False) == WAITER_CADENCE


def test_a_pending_resource_is_looked_at_again_after_a_tenth_of_its_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(waits, "utc_now", lambda: now)

    def after(age: float, created_this_pass: bool = False) -> float:
        return LOAD_BALANCER_AVAILABLE.requeue(created_this_pass, now - timedelta(seconds=age))

    assert after(0.0, created_this_pass=True) == MIN_POLL  # just created: its create's answer said pending
    assert after(-30.0) == MIN_POLL  # a clock behind AWS's
    assert after(15.0) == MIN_POLL
    assert after(30.0) == pytest.approx(30.0 * POLL_SHARE)  # noticed at most 3 s late after a 30 s wait
    assert after(100.0) == pytest.approx(10.0)
    assert after(3600.0) == WAITER_CADENCE  # never longer than botocore's waiter between two looks
    naive = (now - timedelta(seconds=50)).replace(tzinfo=None)  # moto's timestamps may carry no zone
    assert LOAD_BALANCER_AVAILABLE.requeue(False, naive) == pytest.approx(5.0)


def test_looks_at_a_thirty_second_wait_stay_few_and_notice_it_within_a_tenth() -> None:
    """The schedule the rule above makes, from a create: how many looks a wait of T seconds costs, and how
    late the last one comes."""
    for wait, most_looks in ((10.0, 5), (30.0, 15), (150.0, 32)):
        age, looks = 0.0, 0
        while age < wait:
            age += min(WAITER_CADENCE, max(MIN_POLL, age * POLL_SHARE))
            looks += 1
        assert looks <= most_looks, (wait, looks)
        assert age - wait <= max(MIN_POLL, wait * POLL_SHARE), (wait, age)


def test_pending_nat_gateways_hold_back_only_the_private_route_tables(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, ["nat-gateway"])

    with call_scope() as calls:
        _passes_until(
            harness,
            controllers,
            lambda: _condition(_awscluster(harness), NAT_GATEWAYS_READY) == ("False", "Waiting"),
            "waiting for the NAT gateways",
        )
    created = calls.by_operation()
    awscluster = _awscluster(harness)
    assert pending.creates["nat-gateway"] == 3
    assert created.get("ec2:CreateSecurityGroup") == 3, created
    assert created.get("elbv2:CreateLoadBalancer") == 1, created
    assert created.get("elbv2:CreateTargetGroup") == 1, created
    assert created.get("elbv2:CreateListener") == 1, created
    assert created.get("ec2:CreateRouteTable") == 1, f"only the public route table: {created}"
    assert _condition(awscluster, SECURITY_GROUPS_READY) == ("True", "")
    assert _condition(awscluster, ROUTE_TABLES_READY) == ("False", "WaitingForNatGateways")
    assert not awscluster.status.ready
    network = awscluster.status.network
    assert len(network.subnets) == 6, "subnets are recorded before the cluster is ready"
    assert set(network.security_groups) == {"controlplane", "node", "lb"}
    assert network.api_server_load_balancer is not None
    assert network.api_server_load_balancer.target_group_arn == awscluster.status.resources["apiserver-tg"].id
    public = [s for s in network.subnets if s.is_public]
    assert all(s.route_table_id for s in public), "the public route table does not wait for NAT gateways"
    assert not any(s.route_table_id for s in network.subnets if not s.is_public)


def test_a_pass_waiting_only_on_nat_gateways_polls_just_them_once_at_the_waiter_cadence(
    harness: Harness, example: Callable[[], list[KubeObject]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, controllers = _start(harness, example, ["nat-gateway"])
    an_hour_on = datetime.now(UTC) + timedelta(
        hours=1
    )  # they have been pending long: looked at every cadence
    monkeypatch.setattr(waits, "utc_now", lambda: an_hour_on)

    def only_nat_pending() -> bool:
        awscluster = _awscluster(harness)
        return _condition(awscluster, NAT_GATEWAYS_READY) == ("False", "Waiting") and _condition(
            awscluster, LOAD_BALANCER_READY
        ) == ("True", "")

    results = _passes_until(harness, controllers, only_nat_pending, "only the NAT gateways pending")
    assert results[CLUSTER].requeue_after == WAITER_CADENCE, results[CLUSTER]
    nat_ids = sorted(
        record.id
        for role, record in _awscluster(harness).status.resources.items()
        if record.kind == "nat-gateway"
    )
    assert len(nat_ids) == 3
    cluster_controller = next(c for c in controllers if c.kind is AWSCluster)
    asked = _nat_ids_asked(harness)

    with call_scope() as calls:
        result = cluster_controller.reconcile(CLUSTER)

    by_operation = calls.by_operation()
    assert by_operation.get("ec2:DescribeNatGateways") == 1, by_operation
    assert asked == [nat_ids], "the wait describes exactly the pending NAT gateways"
    assert result.error is None, result
    assert result.requeue_after == WAITER_CADENCE, result
    assert not calls.total(mutating=True), f"a waiting pass changed something: {by_operation}"
    assert _condition(_awscluster(harness), NAT_GATEWAYS_READY) == ("False", "Waiting")


def test_a_pass_waiting_only_on_the_load_balancer_polls_just_it(
    harness: Harness, example: Callable[[], list[KubeObject]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pending, controllers = _start(harness, example, ["load-balancer"])
    an_hour_on = datetime.now(UTC) + timedelta(hours=1)  # pending long: looked at every cadence
    monkeypatch.setattr(waits, "utc_now", lambda: an_hour_on)

    def only_lb_pending() -> bool:
        awscluster = _awscluster(harness)
        return _condition(awscluster, LOAD_BALANCER_READY) == ("False", "Waiting") and _condition(
            awscluster, NAT_GATEWAYS_READY
        ) == ("True", "")

    _passes_until(harness, controllers, only_lb_pending, "only the load balancer pending")
    cluster_controller = next(c for c in controllers if c.kind is AWSCluster)

    with call_scope() as calls:
        result = cluster_controller.reconcile(CLUSTER)

    by_operation = calls.by_operation()
    assert by_operation.get("elbv2:DescribeLoadBalancers") == 1, by_operation
    assert "elbv2:DescribeTargetGroups" not in by_operation, by_operation
    assert "elbv2:DescribeListeners" not in by_operation, by_operation
    assert result.requeue_after == WAITER_CADENCE, result
    assert (
        "provisioning"
        in (get_condition(_awscluster(harness).status, LOAD_BALANCER_READY) or _never()).message
    )
    assert pending.creates["load-balancer"] == 1


def _never() -> Any:
    raise AssertionError("condition missing")


def test_machines_launch_and_register_while_nat_gateways_and_the_load_balancer_are_pending(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, ["nat-gateway", "load-balancer"])

    def machines_ready() -> bool:
        return all(_awsmachine(harness, name).status.ready for name in MACHINES)

    _passes_until(harness, controllers, machines_ready, "machines ready")
    awscluster = _awscluster(harness)
    assert _condition(awscluster, NAT_GATEWAYS_READY) == ("False", "Waiting")
    assert _condition(awscluster, LOAD_BALANCER_READY) == ("False", "Waiting")
    assert not awscluster.status.ready
    assert sorted(_instances(harness).values()) == sorted(MACHINES), "one instance per machine"
    control_plane = _awsmachine(harness, CONTROL_PLANE)
    assert _condition(control_plane, LB_ATTACHED) == ("True", "")
    lb = awscluster.status.network.api_server_load_balancer
    assert lb is not None
    assert lb.target_group_arn is not None
    health = harness.aws.elbv2.raw.describe_target_health(TargetGroupArn=lb.target_group_arn)
    registered = {d["Target"]["Id"] for d in health["TargetHealthDescriptions"]}
    assert registered == {control_plane.status.instance_id}, (
        "the control plane registers while the LB provisions"
    )
    assert pending.creates["load-balancer"] == 1


def test_a_pending_instance_is_polled_at_the_instance_running_cadence(
    harness: Harness, example: Callable[[], list[KubeObject]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The clock the first poll reads stands still at the test's start (the launches come after it), so
    # "moments after the launch" holds however slowly the passes run; later it moves on by the first poll's
    # delay instead of the test waiting for it.
    started = datetime.now(UTC)
    monkeypatch.setattr(waits, "utc_now", lambda: started)
    pending, controllers = _start(harness, example, ["instance"])
    keys = [ObjectKey("AWSMachine", "default", name) for name in MACHINES]

    def launched() -> bool:
        return all(_awsmachine(harness, name).status.instance_id for name in MACHINES)

    results = _passes_until(harness, controllers, launched, "instances launched")
    for key in keys:
        assert results[key].requeue_after == MIN_POLL, (key, results[key])
    # A reconcile moments after the launch (its own status write wakes it) still looks soon.
    results = reconcile_pass(controllers, harness.store)
    for key in keys:
        assert results[key].requeue_after == MIN_POLL, (key, results[key])
    # A minute after the launch (the clock moved on instead of the test waiting): a tenth of that, give or
    # take the launch time's precision; an hour after: the waiter's cadence.
    now = datetime.now(UTC)
    since_start = (now - started).total_seconds()  # the launches came between the test's start and now
    minute = now + timedelta(seconds=60)
    monkeypatch.setattr(waits, "utc_now", lambda: minute)
    results = reconcile_pass(controllers, harness.store)
    for key in keys:
        after = results[key].requeue_after
        assert after is not None, (key, results[key])
        assert 60 * POLL_SHARE - 0.1 <= after <= (60 + since_start) * POLL_SHARE + 0.1, (key, results[key])
    hour = datetime.now(UTC) + timedelta(hours=1)
    monkeypatch.setattr(waits, "utc_now", lambda: hour)
    results = reconcile_pass(controllers, harness.store)
    for key in keys:
        assert results[key].requeue_after == WAITER_CADENCE, (key, results[key])
        assert _condition(_awsmachine(harness, key.name), INSTANCE_READY) == ("False", "Waiting")
    assert pending.creates["instance"] == 3


def test_the_cluster_becomes_ready_once_nat_gateways_and_the_load_balancer_are_released_with_no_duplicate(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    pending, controllers = _start(harness, example, ["nat-gateway", "load-balancer"])

    with call_scope() as calls:
        _passes_until(
            harness,
            controllers,
            lambda: all(_awsmachine(harness, name).status.ready for name in MACHINES),
            "machines ready while the cluster waits",
        )
        for _ in range(2):
            reconcile_pass(controllers, harness.store)
        assert not _awscluster(harness).status.ready
        pending.release("nat-gateway")
        pending.release("load-balancer")
        _passes_until(harness, controllers, lambda: _awscluster(harness).status.ready, "cluster ready")

    mutating = calls.mutating_operations()
    assert pending.creates["nat-gateway"] == 3
    assert pending.creates["load-balancer"] == 1
    expected = {
        "ec2:CreateVpc": 1,
        "ec2:CreateSubnet": 6,
        "ec2:CreateNatGateway": 3,
        "ec2:AllocateAddress": 3,
        "ec2:CreateRouteTable": 4,
        "ec2:CreateRoute": 4,
        "ec2:AssociateRouteTable": 6,
        "ec2:CreateSecurityGroup": 3,
        "elbv2:CreateLoadBalancer": 1,
        "elbv2:CreateTargetGroup": 1,
        "elbv2:CreateListener": 1,
        "ec2:RunInstances": 3,
        "elbv2:RegisterTargets": 1,
    }
    assert {op: mutating.get(op) for op in expected} == expected, mutating
    awscluster = _awscluster(harness)
    assert _condition(awscluster, NAT_GATEWAYS_READY) == ("True", "")
    assert _condition(awscluster, ROUTE_TABLES_READY) == ("True", "")
    assert _condition(awscluster, LOAD_BALANCER_READY) == ("True", "")
    assert awscluster.spec.control_plane_endpoint.is_set
    subnets = awscluster.status.network.subnets
    assert all(s.route_table_id for s in subnets)
    assert all(s.nat_gateway_id for s in subnets if s.is_public)
    assert len(_instances(harness)) == 3


def test_machines_wait_for_the_cluster_network_and_never_launch_into_a_cluster_being_deleted(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    _, controllers = _start(harness, example, ["nat-gateway"])
    without_awscluster = [c for c in controllers if c.kind is not AWSCluster]
    reconcile_pass(without_awscluster, harness.store)
    reconcile_pass(without_awscluster, harness.store)
    for name in MACHINES:
        machine = _awsmachine(harness, name)
        assert _condition(machine, INSTANCE_READY) == ("False", "WaitingForClusterInfrastructure")
        message = (get_condition(machine.status, INSTANCE_READY) or _never()).message or ""
        assert "subnets" in message, message
    assert not _instances(harness)

    awscluster_controller = next(c for c in controllers if c.kind is AWSCluster)
    awscluster_controller.reconcile(CLUSTER)
    assert _awscluster(harness).status.network.subnets, "the first pass records the subnets"
    harness.store.delete(AWSCluster, "demo", "default")
    assert _awscluster(harness).being_deleted
    machine_controller = next(c for c in controllers if c.kind is AWSMachine)
    for name in MACHINES:
        machine_controller.reconcile(ObjectKey("AWSMachine", "default", name))
    assert not _instances(harness), "a machine launched into a cluster being deleted"
    message = (get_condition(_awsmachine(harness, CONTROL_PLANE).status, INSTANCE_READY) or _never()).message
    assert "being deleted" in (message or "")
