"""The control-plane load balancer classes' own behaviour against moto: readiness, listeners re-pointed in
place, deletion order, target registration states."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import DependencyViolation, NotFound
from capa_py.aws.observations import Observations
from resources._common import ELBV2_DESCRIBE_BATCH
from resources.listener import Listener, ListenerDesired
from resources.load_balancer import LoadBalancer, LoadBalancerDesired
from resources.target_group import (
    TargetGroup,
    TargetGroupDesired,
    TargetRegistration,
    TargetRegistrationDesired,
)
from tests.resources.builders import Builder


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
