"""What each call costs in AWS API calls, counted with capa_py.aws.accounting.call_scope.

Calls are this project's main cost (and what throttling meters), so the cost of the common paths is pinned.
"""

from __future__ import annotations

from capa_py.aws.accounting import call_scope
from capa_py.engine.tags import lookup_tags
from resources.instance import Instance
from resources.load_balancer import LoadBalancer
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.security_group import IngressRule, SecurityGroup, SecurityGroupDesired
from resources.vpc import Vpc, VpcDesired
from tests.resources.builders import Builder


def test_create_costs_one_call_and_update_what_it_changes(build: Builder) -> None:
    vpcs = Vpc(build.aws)
    desired = VpcDesired("10.0.0.0/16")

    with call_scope() as create:
        vpc = vpcs.create(desired, build.tags("vpc"), None)
    with call_scope() as first_update:
        vpcs.update(vpc, desired)
    with call_scope() as second_update:
        vpcs.update(vpc, desired)

    assert create.by_operation() == {"ec2:CreateVpc": 1}, "tags ride on the create: no CreateTags"
    assert first_update.by_operation() == {"ec2:DescribeVpcAttribute": 2, "ec2:ModifyVpcAttribute": 1}
    assert second_update.by_operation() == {"ec2:DescribeVpcAttribute": 2}
    assert second_update.total(mutating=True) == 0


def test_instance_create_with_root_volume_reads_the_image_once(build: Builder) -> None:
    desired = build.instance_desired(build.subnet().id, root_volume_size=30, user_data=b"#!/bin/sh\n")
    with call_scope() as calls:
        Instance(build.aws).create(desired, build.tags("node"), "token")

    assert calls.by_operation() == {"ec2:DescribeImages": 1, "ec2:RunInstances": 1}
    assert calls.by_outcome() == {"ok": 2}


def test_security_group_rules_are_authorized_in_one_call(build: Builder) -> None:
    groups = SecurityGroup(build.aws)
    rules = tuple(IngressRule("tcp", port, port, cidr_block="10.0.0.0/16") for port in (22, 6443, 10250))
    desired = SecurityGroupDesired(build.vpc().id, "alpha-node", "nodes", rules)
    group = groups.create(desired, None, None)

    with call_scope() as calls:
        groups.update(group, desired)

    assert calls.by_operation() == {"ec2:AuthorizeSecurityGroupIngress": 1}


def test_lookups_by_tags_cost(build: Builder) -> None:
    nat = NatGatewayDesired(build.subnet().id, build.elastic_ip().id)
    NatGateway(build.aws).create(nat, build.tags("nat"), None)
    for _ in range(3):
        build.load_balancer()

    with call_scope() as ec2_lookup:
        NatGateway(build.aws).describe_by_tags(lookup_tags("alpha", "nat"), nat)
    with call_scope() as elb_lookup:
        LoadBalancer(build.aws).describe_by_tags(lookup_tags("alpha", "lb-1"), None)

    assert ec2_lookup.by_operation() == {"ec2:DescribeNatGateways": 1}, "EC2 filters by tag on the server"
    assert elb_lookup.by_operation() == {
        "elbv2:DescribeLoadBalancers": 1,
        "elbv2:DescribeTags": 1,
    }, "ELBv2 has no tag filter: list, then read tags 20 ARNs at a time"
