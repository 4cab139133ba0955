"""A world with every kind of leak the audit must find, made the way each happens in practice.

* ``alpha``: a healthy cluster (VPC, subnets, gateways, NAT, routes, groups, load balancer, one machine),
  made by the real controllers; then, against it:
  - a subnet created by the engine whose status write failed (tagged, unrecorded);
  - an elastic IP whose allocation was killed right after AWS answered (tagged, unrecorded);
  - an elastic IP allocated untagged by a separate-tagging create killed after ``AllocateAddress``, with
    its intent record in alpha's status (pending intent);
  - a launch template and an unattached volume made by hand with alpha's owned tag;
  - a hand-made untagged security group in alpha's VPC whose rule references alpha's node group, and an
    untagged network interface in one of alpha's subnets;
  - a recorded route deleted behind the controllers' back (missing);
* ``beta``: a cluster made by the controllers whose objects were then removed from the store (cluster
  gone), with an untagged network interface left in its VPC;
* untouchables: an untagged VPC with a subnet outside every managed VPC, and a VPC *shared* with alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from capa_py.api.aws import AWSCluster
from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.errors import RetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.recorder import StatusRecorder
from capa_py.store.protocol import ObjectStore
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.subnet import Subnet, SubnetDesired
from tests.audit.helpers import (
    REGION,
    ZONE,
    FailingStatusStore,
    apply_cluster,
    cluster_manifest,
    crash_after,
    crashing,
    forget_cluster,
    make_pool,
    owned,
    recorded_ids,
    register_image,
    tag_spec,
)
from tests.harness.moto_server import MotoServer


@dataclass
class World:
    store: ObjectStore
    pool: ClientPool
    alpha: dict[str, str] = field(default_factory=dict)
    """id → kind of everything alpha records (after the route was deleted behind its back)."""
    beta: dict[str, str] = field(default_factory=dict)
    """id → kind of everything beta recorded before its objects were removed."""
    alpha_vpc: str = ""
    beta_vpc: str = ""
    unrecorded_subnet: str = ""
    crashed_eip: str = ""
    intent_eip: str = ""
    hand_template: str = ""
    hand_volume: str = ""
    debug_group: str = ""
    alpha_eni: str = ""
    beta_eni: str = ""
    missing_route: str = ""
    outside_vpc: str = ""
    outside_subnet: str = ""
    shared_vpc: str = ""

    def alpha_object(self) -> AWSCluster:
        return self.store.get(AWSCluster, "alpha", "default")


def _new_addresses(pool: ClientPool, before: set[str]) -> list[str]:
    addresses = pool.for_region(REGION).ec2.raw.describe_addresses()["Addresses"]
    return [a["AllocationId"] for a in addresses if a["AllocationId"] not in before]


def _addresses(pool: ClientPool) -> set[str]:
    return {a["AllocationId"] for a in pool.for_region(REGION).ec2.raw.describe_addresses()["Addresses"]}


def build_world(server: MotoServer, store: ObjectStore, scratch: Path) -> World:
    server.reset()
    pool = make_pool(server, scratch)
    world = World(store, pool)
    ec2 = pool.for_region(REGION).ec2.raw
    ami = register_image(pool)

    apply_cluster(store, pool, cluster_manifest("beta", "10.2"))
    world.beta = recorded_ids(store, "beta")
    world.beta_vpc = next(i for i, k in world.beta.items() if k == "vpc")
    forget_cluster(store, "beta")

    apply_cluster(store, pool, cluster_manifest("alpha", "10.1", ami))
    alpha = world.alpha_object()
    world.alpha_vpc = alpha.status.resources["vpc"].id
    aws = pool.for_region(REGION)

    # A lost status write: the engine's subnet exists, tagged, recorded nowhere.
    lost = StatusRecorder(FailingStatusStore(store), alpha)  # type: ignore[arg-type]
    with pytest.raises(RetryableError, match="recording failed"):
        Engine(MOTO).ensure(
            Subnet(aws),
            "subnet-extra",
            SubnetDesired(world.alpha_vpc, "10.1.32.0/20", ZONE),
            Scope("alpha", alpha.metadata.uid, lost),
        )
    world.unrecorded_subnet = ec2.describe_subnets(
        Filters=[{"Name": "cidr-block", "Values": ["10.1.32.0/20"]}]
    )["Subnets"][0]["SubnetId"]

    # A crash between AllocateAddress and the record (tag on create: tagged, unrecorded).
    before = _addresses(pool)
    with crash_after("AllocateAddress"):
        crash_pool = make_pool(server, scratch)
        recorder = StatusRecorder(store, world.alpha_object())
        scope = Scope("alpha", alpha.metadata.uid, recorder)
        crashing(
            lambda: Engine(MOTO).ensure(
                ElasticIp(crash_pool.for_region(REGION)), "eip-bastion", ElasticIpDesired(), scope
            )
        )
    world.crashed_eip = _new_addresses(pool, before)[0]

    # A crash in a separate-tagging create, after the intent was written: untagged, with an intent.
    before = _addresses(pool)
    separate_tagging = Engine(MOTO.with_overrides({"elastic-ip": {"tag_on_create": False}}))
    with crash_after("AllocateAddress"):
        crash_pool = make_pool(server, scratch)
        recorder = StatusRecorder(store, world.alpha_object())
        scope = Scope("alpha", alpha.metadata.uid, recorder)
        crashing(
            lambda: separate_tagging.ensure(
                ElasticIp(crash_pool.for_region(REGION)), "eip-intent", ElasticIpDesired(), scope
            )
        )
    world.intent_eip = _new_addresses(pool, before)[0]
    assert "eip-intent" in world.alpha_object().status.intents

    # Made by hand with alpha's owned tag.
    world.hand_template = ec2.create_launch_template(
        LaunchTemplateName="alpha-by-hand",
        LaunchTemplateData={"InstanceType": "t3.small"},
        TagSpecifications=tag_spec("launch-template", owned("alpha", store.uid)),
    )["LaunchTemplate"]["LaunchTemplateId"]
    world.hand_volume = ec2.create_volume(
        AvailabilityZone=ZONE, Size=8, TagSpecifications=tag_spec("volume", owned("alpha", store.uid))
    )["VolumeId"]

    # Untagged, inside alpha's VPC: a debugging group that references alpha's nodes, and an interface.
    world.debug_group = ec2.create_security_group(
        VpcId=world.alpha_vpc, GroupName="debug", Description="made by hand"
    )["GroupId"]
    node_group = alpha.status.resources["sg-node"].id
    ec2.authorize_security_group_ingress(
        GroupId=world.debug_group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "UserIdGroupPairs": [{"GroupId": node_group}]}
        ],
    )
    private_subnet = alpha.status.resources["subnet-private-us-east-1a"].id
    world.alpha_eni = ec2.create_network_interface(SubnetId=private_subnet)["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    beta_subnet = next(i for i, k in world.beta.items() if k == "subnet")
    world.beta_eni = ec2.create_network_interface(SubnetId=beta_subnet)["NetworkInterface"][
        "NetworkInterfaceId"
    ]

    # Drift: a recorded route deleted behind the controllers' back.
    world.missing_route = alpha.status.resources["route-public-default"].id
    table, destination = world.missing_route.split("|")
    ec2.delete_route(RouteTableId=table, DestinationCidrBlock=destination)

    # Never ours: an untagged VPC outside every managed one, and a VPC shared with alpha.
    world.outside_vpc = ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]
    world.outside_subnet = ec2.create_subnet(VpcId=world.outside_vpc, CidrBlock="10.99.1.0/24")["Subnet"][
        "SubnetId"
    ]
    shared = {"sigs.k8s.io/cluster-api-provider-aws/cluster/alpha": "shared"}
    world.shared_vpc = ec2.create_vpc(CidrBlock="10.98.0.0/16", TagSpecifications=tag_spec("vpc", shared))[
        "Vpc"
    ]["VpcId"]

    world.alpha = recorded_ids(store, "alpha")
    return world
