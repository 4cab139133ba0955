"""The control-plane load balancer classes' own behaviour against moto: readiness, listeners re-pointed in
place, deletion order, target registration states."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import DependencyViolation, NotFound, Transient
from capa_py.aws.observations import Observations
from capa_py.engine.engine import Engine
from capa_py.engine.errors import NaturalKeyTaken
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import managed_tags
from capa_py.store import SQLiteStore
from resources._common import ELBV2_DESCRIBE_BATCH
from resources.listener import Listener, ListenerDesired
from resources.load_balancer import LoadBalancer, LoadBalancerDesired
from resources.target_group import (
    TargetGroup,
    TargetGroupDesired,
    TargetRegistration,
    TargetRegistrationDesired,
)
from tests.engine.support import Faults, FlakyStatusStore, Owner
from tests.resources.builders import CLUSTER, Builder


def test_load_balancer_is_a_network_load_balancer_ready_when_active(build: Builder) -> None:
    balancers = LoadBalancer(build.aws)
    subnet = build.subnet(public=True)
    desired = LoadBalancerDesired("alpha-apiserver", (subnet.id,))
    created = balancers.create(desired, build.tags("apiserver"), None)
    assert created.attributes["type"] == "network"
    assert created.attributes["subnet_ids"] == [subnet.id]
    assert created.state == "provisioning"
    assert not balancers.is_ready(created)

    observed = balancers.describe_by_key(desired)
    assert observed is not None
    assert observed.state == "active", "moto activates a load balancer when it is described"
    assert balancers.is_ready(observed)
    assert observed.attributes["dns_name"]
    assert observed.tags == build.tags("apiserver")


def test_listener_update_forwards_to_another_target_group(build: Builder) -> None:
    listeners = Listener(build.aws)
    subnet = build.subnet()
    vpc_id = subnet.attributes["vpc_id"]
    lb = build.load_balancer(subnet.id)
    first, second = build.target_group(vpc_id), build.target_group(vpc_id)
    created = listeners.create(ListenerDesired(lb.id, first.id), build.tags("listener"), None)

    desired = ListenerDesired(lb.id, second.id)
    observed = listeners.describe_by_key(desired)
    assert observed is not None
    assert observed.id == created.id
    assert observed.attributes["target_group_arn"] == first.id

    assert listeners.update(observed, desired) is True
    refreshed = listeners.describe_by_id(created.id)
    assert refreshed is not None
    assert refreshed.attributes["target_group_arn"] == second.id
    assert listeners.update(refreshed, desired) is False
    assert listeners.describe_by_key(ListenerDesired(lb.id, second.id, port=443)) is None


def test_listener_describe_by_tags_without_desired_searches_every_load_balancer(
    build: Builder, lookup: Any
) -> None:
    listeners = Listener(build.aws)
    subnet = build.subnet()
    target_group = build.target_group(subnet.attributes["vpc_id"])
    build.load_balancer(subnet.id)  # another load balancer, no listener
    lb = build.load_balancer(subnet.id)
    created = listeners.create(ListenerDesired(lb.id, target_group.id), build.tags("listener"), None)

    assert [o.id for o in listeners.describe_by_tags(lookup("listener"), None)] == [created.id]


def test_target_group_in_use_cannot_be_deleted_before_its_listener(build: Builder) -> None:
    subnet = build.subnet()
    target_groups = TargetGroup(build.aws)
    target_group = target_groups.create(
        TargetGroupDesired("alpha-apiserver", subnet.attributes["vpc_id"]), build.tags("tg"), None
    )
    assert target_group.attributes["port"] == 6443
    assert target_group.attributes["protocol"] == "TCP"
    assert target_group.attributes["health_check_protocol"] == "TCP"
    lb = build.load_balancer(subnet.id)
    listener = Listener(build.aws).create(ListenerDesired(lb.id, target_group.id), None, None)

    with pytest.raises(DependencyViolation):
        target_groups.delete(target_group.id)

    Listener(build.aws).delete(listener.id)
    target_groups.delete(target_group.id)
    assert target_groups.describe_by_id(target_group.id) is None


def test_deleting_the_load_balancer_deletes_its_listeners(build: Builder) -> None:
    subnet = build.subnet()
    lb = build.load_balancer(subnet.id)
    target_group = build.target_group(subnet.attributes["vpc_id"])
    listener = Listener(build.aws).create(ListenerDesired(lb.id, target_group.id), None, None)

    LoadBalancer(build.aws).delete(lb.id)

    assert LoadBalancer(build.aws).describe_by_id(lb.id) is None
    assert Listener(build.aws).describe_by_id(listener.id) is None
    LoadBalancer(build.aws).delete(lb.id)  # AWS: deleting a deleted load balancer succeeds


def test_target_registration_lifecycle(build: Builder) -> None:
    registrations = TargetRegistration(build.aws)
    subnet = build.subnet()
    target_group = build.target_group(subnet.attributes["vpc_id"])
    instance = build.instance(subnet.id)
    desired = TargetRegistrationDesired(target_group.id, instance.id)
    assert registrations.describe_by_key(desired) is None

    created = registrations.create(desired, None, None)
    assert created.id == f"{target_group.id}|{instance.id}"
    observed = registrations.describe_by_key(desired)
    assert observed is not None
    assert observed.id == created.id
    assert observed.state == "healthy", "moto reports registered targets healthy at once"
    assert observed.attributes["port"] == 6443
    registrations.create(desired, None, None)  # registering again is a no-op in AWS too

    registrations.delete(created.id)

    assert registrations.describe_by_id(created.id) is None, "deregistered: Target.NotRegistered"
    with pytest.raises(NotFound):
        registrations.delete(created.id)  # moto: InvalidTarget (AWS succeeds)


def test_registration_of_a_deleted_target_group_is_gone(build: Builder) -> None:
    subnet = build.subnet()
    target_group = build.target_group(subnet.attributes["vpc_id"])
    registration = TargetRegistration(build.aws).create(
        TargetRegistrationDesired(target_group.id, build.instance(subnet.id).id), None, None
    )
    TargetGroup(build.aws).delete(target_group.id)

    assert TargetRegistration(build.aws).describe_by_id(registration.id) is None
    with pytest.raises(NotFound):
        TargetRegistration(build.aws).delete(registration.id)


def test_a_name_is_looked_up_in_the_listing_the_lookup_by_tags_just_made(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ELBv2 has no tag filter: the lookup by tags lists every load balancer of the region, so the lookup
    by name right after it is answered from that listing, free or taken, without a call."""
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))
    balancers = LoadBalancer(build.aws)
    subnet = build.subnet(public=True)
    other = LoadBalancerDesired("beta-apiserver", (subnet.id,))
    balancers.create(other, build.tags("other"), None)
    desired = LoadBalancerDesired("alpha-apiserver", (subnet.id,))

    with call_scope() as calls:
        assert balancers.describe_by_tags(build.tags("apiserver"), desired) == []
        assert balancers.describe_by_key(desired) is None
        taken = balancers.describe_by_key(other)
    assert taken is not None
    assert taken.tags == build.tags("other"), "the holder comes with its tags, for the ownership check"
    assert calls.by_operation() == {"elbv2:DescribeLoadBalancers": 1, "elbv2:DescribeTags": 1}


def test_after_a_create_whose_answer_was_lost_the_name_is_asked_of_aws(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto makes a second load balancer of a name that exists, so the lookup by name before a create must
    never answer from a listing made before a create whose outcome is unknown: that listing is forgotten."""
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))
    balancers = LoadBalancer(build.aws)
    subnet = build.subnet(public=True)
    desired = LoadBalancerDesired("alpha-apiserver", (subnet.id,))
    assert balancers.describe_by_tags(build.tags("apiserver"), desired) == []
    faults = Faults()
    faults.lose_response(build.aws, "CreateLoadBalancer", service="elbv2")
    try:
        with pytest.raises(Transient):
            balancers.create(desired, build.tags("apiserver"), None)
    finally:
        faults.clear()

    found = balancers.describe_by_key(desired)
    assert found is not None, "the load balancer the lost create made is found by its name"
    assert len(build.aws.elbv2.call("DescribeLoadBalancers")["LoadBalancers"]) == 1


def test_the_provisioning_poll_reads_no_tags(build: Builder) -> None:
    balancers = LoadBalancer(build.aws)
    subnet = build.subnet(public=True)
    created = balancers.create(LoadBalancerDesired("alpha-apiserver", (subnet.id,)), build.tags("lb"), None)
    with call_scope() as calls:
        polled = balancers.poll(created.id)
    assert polled is not None
    assert polled.state == "active"
    assert calls.by_operation() == {"elbv2:DescribeLoadBalancers": 1}


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    with SQLiteStore(tmp_path / "state.db") as store:
        yield Owner.create(FlakyStatusStore(store))


def test_a_target_group_in_a_vpc_this_process_just_made_is_created_without_a_lookup(
    build: Builder, owner: Owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing but this process can have put a group into a VPC it has just made, and a taken name is
    refused: the create is the only call."""
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))
    vpc = build.vpc()
    build.aws.observations.born(vpc.id)
    desired = TargetGroupDesired("alpha-apiserver-tg", vpc.id)

    with call_scope() as calls:
        created = Engine(MOTO).ensure(TargetGroup(build.aws), "apiserver-tg", desired, owner.scope())

    assert calls.by_operation() == {"elbv2:CreateTargetGroup": 1}
    assert owner.status().resources["apiserver-tg"].id == created.id


def test_a_target_group_name_held_elsewhere_is_refused_then_looked_up(
    build: Builder, owner: Owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create first is refused (DuplicateTargetGroupName): the name is looked up then, and another
    cluster's group is never adopted."""
    groups = TargetGroup(build.aws)
    groups.create(TargetGroupDesired("alpha-apiserver-tg", build.vpc().id), build.tags("tg", "other"), None)
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))
    vpc = build.vpc("10.1.0.0/16")
    build.aws.observations.born(vpc.id)

    with pytest.raises(NaturalKeyTaken):
        Engine(MOTO).ensure(
            groups, "apiserver-tg", TargetGroupDesired("alpha-apiserver-tg", vpc.id), owner.scope()
        )
    assert "apiserver-tg" not in owner.status().resources
    assert len(build.aws.elbv2.call("DescribeTargetGroups")["TargetGroups"]) == 1


def test_a_target_group_in_a_vpc_made_by_an_earlier_process_is_looked_up_first(
    build: Builder, owner: Owner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a crash the VPC is not this process's: the group the crashed pass made is found, not made
    again."""
    vpc = build.vpc()
    desired = TargetGroupDesired("alpha-apiserver-tg", vpc.id)
    made = TargetGroup(build.aws).create(
        desired, managed_tags(CLUSTER, "apiserver-tg", store_uid=owner.scope().store_uid), None
    )
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))

    adopted = Engine(MOTO).ensure(TargetGroup(build.aws), "apiserver-tg", desired, owner.scope())

    assert adopted.id == made.id
    assert len(build.aws.elbv2.call("DescribeTargetGroups")["TargetGroups"]) == 1


def test_more_load_balancers_than_one_describe_takes_are_read_from_one_listing(build: Builder) -> None:
    # A describe takes 20 ARNs: 200 clusters' load balancers would take ten, one listing of the region's
    # load balancers (400 a page) takes one. Their tags still cost a DescribeTags per 20.
    subnet = build.subnet()
    arns = [build.load_balancer(subnet.id).id for _ in range(ELBV2_DESCRIBE_BATCH + 1)]
    build.load_balancer(subnet.id)  # listed too, and left out

    with call_scope() as calls:
        found = LoadBalancer(build.aws).describe_many(arns)

    assert sorted(found) == sorted(arns)
    assert all(o.tags for o in found.values()), "tags are read for every one found"
    assert calls.by_operation() == {"elbv2:DescribeLoadBalancers": 1, "elbv2:DescribeTags": 2}


def test_tags_read_once_serve_later_refreshes_until_capa_py_tags_again(
    build: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DescribeTags per 20 ARNs at every refresh would grow with the clusters: what was read is reused
    # (as capa controller and capa apply share it), and forgotten when capa-py tags the resource.
    monkeypatch.setattr(build.aws, "observations", Observations(enabled=True))
    balancers = LoadBalancer(build.aws)
    arn = build.load_balancer().id

    with call_scope() as first:
        read = balancers.describe_many([arn])
    with call_scope() as second:
        again = balancers.describe_many([arn])
    balancers.tag(arn, {"team": "platform"})
    with call_scope() as after_tagging:
        tagged = balancers.describe_many([arn])

    assert first.by_operation() == {"elbv2:DescribeLoadBalancers": 1, "elbv2:DescribeTags": 1}
    assert second.by_operation() == {"elbv2:DescribeLoadBalancers": 1}, "the tags read moments ago"
    assert again[arn].tags == read[arn].tags
    assert read[arn].tags["sigs.k8s.io/cluster-api-provider-aws/cluster/alpha"] == "owned"
    assert after_tagging.by_operation() == {"elbv2:DescribeLoadBalancers": 1, "elbv2:DescribeTags": 1}
    assert tagged[arn].tags["team"] == "platform"
