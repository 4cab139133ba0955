"""Describes for large accounts: id filters within AWS's 200 values, pages followed to the end.

A refresh describes every due resource of a kind at once, for every cluster of the process: with 200
clusters that is 200 VPC ids, 1,200 subnet ids, 600 instance ids. AWS takes at most 200 values in one
filter and answers long listings a page at a time, so these tests count the calls a describe of more ids
than one filter holds makes, check every filter sent, and follow a listing through its pages.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.tags import STORE_TAG
from resources._common import EC2_FILTER_VALUES, ec2_by_filter
from resources.instance import Instance
from resources.subnet import Subnet, SubnetDesired
from tests.resources.builders import ZONE, Builder

MANY = EC2_FILTER_VALUES + 5
"""More ids than one filter takes."""


@pytest.fixture
def sent_filters(aws: AWSClients) -> Iterator[list[list[dict[str, Any]]]]:
    """The ``Filters`` of every EC2 describe the test's clients send, as sent."""
    sent: list[list[dict[str, Any]]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append(params.get("Filters", []))

    events = aws.ec2.raw.meta.events
    events.register("provide-client-params.ec2.*", record, unique_id="paging-test-filters")
    yield sent
    events.unregister("provide-client-params.ec2.*", unique_id="paging-test-filters")


def _subnets(build: Builder, count: int, tags: dict[str, str]) -> list[str]:
    vpc = build.vpc("10.0.0.0/16")
    cidrs = ipaddress.IPv4Network("10.0.0.0/16").subnets(new_prefix=28)
    return [
        Subnet(build.aws).create(SubnetDesired(vpc.id, str(next(cidrs)), ZONE), tags, None).id
        for _ in range(count)
    ]


def test_more_ids_than_a_filter_takes_are_read_from_one_listing_of_capa_pys_resources(
    build: Builder, aws: AWSClients, sent_filters: list[list[dict[str, Any]]]
) -> None:
    ids = _subnets(build, MANY, build.tags("subnet", **{STORE_TAG: "store-uid"}))
    sent_filters.clear()

    with call_scope() as calls:
        found = Subnet(aws).describe_many(ids)

    assert sorted(found) == sorted(ids)
    assert calls.by_operation() == {"ec2:DescribeSubnets": 1}, "one listing for every id, not one per 200"
    assert sent_filters == [[{"Name": "tag-key", "Values": [STORE_TAG]}]]


def test_ids_that_listing_misses_are_asked_for_200_to_a_filter(
    build: Builder, aws: AWSClients, sent_filters: list[list[dict[str, Any]]]
) -> None:
    # Subnets capa-py did not create (no store tag): a cluster's own network, say.
    ids = _subnets(build, MANY, {"Name": "given"})
    sent_filters.clear()

    with call_scope() as calls:
        found = Subnet(aws).describe_many(ids)

    assert sorted(found) == sorted(ids)
    assert calls.by_operation() == {"ec2:DescribeSubnets": 3}, "the listing, then 200 ids and 5 ids"
    values = [len(v["Values"]) for filters in sent_filters for v in filters]
    assert values == [1, EC2_FILTER_VALUES, MANY - EC2_FILTER_VALUES]
    assert all(n <= EC2_FILTER_VALUES for n in values)


def test_up_to_200_ids_are_one_filter(
    build: Builder, aws: AWSClients, sent_filters: list[list[dict[str, Any]]]
) -> None:
    ids = _subnets(build, 3, build.tags("subnet"))
    sent_filters.clear()

    with call_scope() as calls:
        found = Subnet(aws).describe_many(ids)

    assert sorted(found) == sorted(ids)
    assert calls.by_operation() == {"ec2:DescribeSubnets": 1}
    assert sent_filters == [[{"Name": "subnet-id", "Values": sorted(ids)}]]


def test_a_listing_follows_its_pages_to_the_end(build: Builder, aws: AWSClients) -> None:
    # DescribeInstances pages by reservation (moto pages no other of these describes): one each.
    subnet = build.subnet()
    ids = [build.instance(subnet.id).id for _ in range(12)]

    with call_scope() as calls:
        reservations = ec2_by_filter(aws.ec2, "DescribeInstances", "Reservations", "instance-id", ids, 5)

    assert sorted(i["InstanceId"] for r in reservations for i in r["Instances"]) == sorted(ids)
    assert calls.by_operation() == {"ec2:DescribeInstances": 3}, "pages of 5, 5 and 2 reservations"


def test_instances_are_described_a_thousand_reservations_to_a_page(build: Builder, aws: AWSClients) -> None:
    # Without MaxResults moto answers 100 reservations a page (AWS picks its own size): 600 instances of
    # 200 clusters would take six calls.
    subnet = build.subnet()
    ids = [build.instance(subnet.id).id for _ in range(101)]  # a reservation each

    with call_scope() as calls:
        found = Instance(aws).describe_many(ids)

    assert sorted(found) == sorted(ids)
    assert calls.by_operation() == {"ec2:DescribeInstances": 1}
