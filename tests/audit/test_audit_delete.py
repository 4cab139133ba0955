"""``--delete --yes`` removes every orphan of the world in ``world.py`` in dependency order, handles every
dependency refusal, and leaves alone what is not an orphan: managed and pending resources, untagged
resources in a healthy VPC, other clusters' resources, and what no cluster owns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capa_app.audit import (
    AuditClass,
    AuditOptions,
    AuditReport,
    DeletionPlan,
    DeletionReport,
    DeletionSettings,
    DiscoveryMode,
    Outcome,
    delete_leaks,
    plan_deletion,
    run_audit,
)
from capa_py.aws.session import ClientPool
from capa_py.store import SQLiteStore
from tests.audit.helpers import REGION, make_pool, owned, tag_spec
from tests.audit.world import World, build_world
from tests.harness.moto_server import MotoServer

POLICY = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}
)
FAST = DeletionSettings(dependency_timeout=3.0, wait_timeout=10.0, poll_interval=0.05, max_poll_interval=0.2)


@pytest.fixture(scope="module")
def world(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    scratch = tmp_path_factory.mktemp("audit-delete")
    with SQLiteStore(Path(scratch) / "state.db") as store:
        yield build_world(moto_server, store, scratch)


@pytest.fixture(scope="module")
def before(world: World) -> AuditReport:
    return run_audit(world.store, world.pool)


@pytest.fixture(scope="module")
def beta_deleted(world: World, before: AuditReport) -> DeletionReport:
    """First only beta's orphans (``--cluster beta``)."""
    report = run_audit(world.store, world.pool, AuditOptions(clusters=frozenset({"beta"})))
    return delete_leaks(report, world.store, world.pool, FAST)


@pytest.fixture(scope="module")
def all_deleted(world: World, beta_deleted: DeletionReport) -> tuple[DeletionReport, AuditReport]:
    """Then every cluster's; returns the deletion and a fresh audit."""
    report = run_audit(world.store, world.pool)
    deletion = delete_leaks(report, world.store, world.pool, FAST)
    return deletion, run_audit(world.store, world.pool)


def _exists(world: World, kind: str, resource_id: str) -> bool:
    ec2: Any = world.pool.for_region(REGION).ec2.raw
    if kind == "vpc":
        return bool(ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [resource_id]}])["Vpcs"])
    if kind == "subnet":
        return bool(ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": [resource_id]}])["Subnets"])
    if kind == "elastic-ip":
        found = ec2.describe_addresses(Filters=[{"Name": "allocation-id", "Values": [resource_id]}])
        return bool(found["Addresses"])
    if kind == "launch-template":
        return resource_id in {
            t["LaunchTemplateId"] for t in ec2.describe_launch_templates()["LaunchTemplates"]
        }
    if kind == "volume":
        return bool(ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [resource_id]}])["Volumes"])
    if kind == "network-interface":
        filters = [{"Name": "network-interface-id", "Values": [resource_id]}]
        return bool(ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"])
    if kind == "security-group":
        filters = [{"Name": "group-id", "Values": [resource_id]}]
        return bool(ec2.describe_security_groups(Filters=filters)["SecurityGroups"])
    raise AssertionError(f"no existence check for {kind}")


def test_deleting_one_cluster_removes_all_its_orphans_and_nothing_else(
    world: World, before: AuditReport, beta_deleted: DeletionReport
) -> None:
    assert not beta_deleted.failed, beta_deleted.failed
    assert beta_deleted.all_removed
    assert {r.id for r in beta_deleted.results} == {*world.beta, world.beta_eni}
    assert not _exists(world, "vpc", world.beta_vpc)
    assert not _exists(world, "network-interface", world.beta_eni)
    # alpha's orphans are another cluster's: untouched by --cluster beta
    assert _exists(world, "subnet", world.unrecorded_subnet)
    assert _exists(world, "elastic-ip", world.crashed_eip)
    assert _exists(world, "launch-template", world.hand_template)


def test_deletion_follows_dependency_order(beta_deleted: DeletionReport) -> None:
    kinds = [r.kind for r in beta_deleted.results if r.outcome == Outcome.DELETED]
    expected_order = [
        "load-balancer",
        "target-group",
        "nat-gateway",
        "elastic-ip",
        "route-table-association",
        "route-table",
        "internet-gateway-attachment",
        "internet-gateway",
        "network-interface",
        "subnet",
        "security-group",
        "vpc",
    ]
    positions = [kinds.index(kind) for kind in expected_order]
    assert positions == sorted(positions), kinds
    with_parent = {r.kind for r in beta_deleted.results if r.outcome == Outcome.WITH_PARENT}
    assert with_parent == {"route", "listener"}


def test_delete_yes_removes_every_orphan_without_unhandled_dependency_violations(
    world: World, all_deleted: tuple[DeletionReport, AuditReport]
) -> None:
    deletion, after = all_deleted
    assert not deletion.failed, deletion.failed
    removed = {r.id for r in deletion.results if r.removed}
    assert removed == {world.unrecorded_subnet, world.crashed_eip, world.hand_template, world.hand_volume}
    for kind, resource_id in (
        ("subnet", world.unrecorded_subnet),
        ("elastic-ip", world.crashed_eip),
        ("launch-template", world.hand_template),
        ("volume", world.hand_volume),
    ):
        assert not _exists(world, kind, resource_id), f"{kind} {resource_id} survived"
    assert not [
        r
        for r in after.rows
        if r.classification in (AuditClass.ORPHAN_CLUSTER_GONE, AuditClass.ORPHAN_UNRECORDED)
    ]


def test_delete_leaves_managed_pending_untagged_and_foreign_resources_alone(
    world: World, all_deleted: tuple[DeletionReport, AuditReport]
) -> None:
    deletion, after = all_deleted
    skipped = {r.id: r.detail for r in deletion.results if r.outcome == Outcome.SKIPPED}
    assert set(skipped) >= {world.alpha_eni, world.debug_group}
    assert all("not an orphan that is deleted" in why for why in skipped.values())
    managed = {r.id for r in after.rows if r.classification == AuditClass.MANAGED}
    assert managed == set(world.alpha) - {world.missing_route}
    assert {r.id for r in after.rows if r.classification == AuditClass.PENDING_INTENT} == {world.intent_eip}
    assert _exists(world, "network-interface", world.alpha_eni)
    assert _exists(world, "security-group", world.debug_group)
    assert _exists(world, "vpc", world.outside_vpc)
    assert _exists(world, "subnet", world.outside_subnet)
    assert _exists(world, "vpc", world.shared_vpc)
    leaks = {r.id for r in after.leaks if r.kind != "security-group-rule"}
    assert leaks == {world.alpha_eni, world.debug_group}


# -- the executor on its own: dependency refusals and throttling -----------------------------------------


@dataclass
class Gamma:
    """A hand-made VPC and subnet owned by a cluster that has no objects, and their audit."""

    store: SQLiteStore
    pool: ClientPool
    report: AuditReport
    vpc: str
    subnet: str


@pytest.fixture
def gamma(moto_server: MotoServer, tmp_path: Path) -> Iterator[Gamma]:
    moto_server.reset()
    pool = make_pool(moto_server, tmp_path)
    ec2 = pool.for_region(REGION).ec2.raw
    with SQLiteStore(tmp_path / "state.db") as store:
        tags = owned("gamma", store.uid)
        vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16", TagSpecifications=tag_spec("vpc", tags))["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(
            VpcId=vpc, CidrBlock="10.7.1.0/24", TagSpecifications=tag_spec("subnet", tags)
        )["Subnet"]["SubnetId"]
        report = run_audit(store, pool, AuditOptions(clusters=frozenset({"gamma"})))
        yield Gamma(store, pool, report, vpc, subnet)


def _vpc_first(report: AuditReport) -> DeletionPlan:
    """The plan with the VPC moved before its subnet: AWS refuses it until the subnet is gone."""
    plan = plan_deletion(report)
    plan.steps.sort(key=lambda s: s.row.kind != "vpc")
    return plan


def test_a_dependency_refusal_is_retried_until_the_dependency_is_gone(gamma: Gamma) -> None:
    ec2 = gamma.pool.for_region(REGION).ec2.raw

    def sleep_while_someone_deletes_the_subnet(seconds: float) -> None:
        ec2.delete_subnet(SubnetId=gamma.subnet)

    settings = DeletionSettings(
        dependency_timeout=5.0, poll_interval=0.01, sleep=sleep_while_someone_deletes_the_subnet
    )
    deletion = delete_leaks(gamma.report, gamma.store, gamma.pool, settings, plan=_vpc_first(gamma.report))
    outcomes = {r.kind: (r.outcome, r.attempts) for r in deletion.results}
    assert outcomes["vpc"] == (Outcome.DELETED, 2)
    assert outcomes["subnet"][0] == Outcome.ALREADY_GONE


def test_a_dependency_refusal_that_outlasts_the_timeout_is_reported_not_raised(gamma: Gamma) -> None:
    settings = DeletionSettings(dependency_timeout=0.05, poll_interval=0.01, max_poll_interval=0.01)
    deletion = delete_leaks(gamma.report, gamma.store, gamma.pool, settings, plan=_vpc_first(gamma.report))
    failed = {r.kind: r.detail for r in deletion.failed}
    assert set(failed) == {"vpc"}
    assert "DependencyViolation" in failed["vpc"]
    assert {r.kind: r.outcome for r in deletion.results}["subnet"] == Outcome.DELETED


def test_throttled_deletes_are_retried(gamma: Gamma) -> None:
    raw = gamma.pool.for_region(REGION).ec2.raw
    throttles = {"left": 3}

    class Refused:
        status_code = 400
        headers: dict[str, str] = {}  # noqa: RUF012

    def throttle(**_: Any) -> Any:
        if throttles["left"] == 0:
            return None
        throttles["left"] -= 1
        return Refused(), {"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}

    raw.meta.events.register("before-call.ec2.DeleteSubnet", throttle)
    try:
        deletion = delete_leaks(gamma.report, gamma.store, gamma.pool, FAST)
    finally:
        raw.meta.events.unregister("before-call.ec2.DeleteSubnet", throttle)
    assert not deletion.failed, deletion.failed
    assert throttles["left"] == 0
    assert {r.kind: r.outcome for r in deletion.results} == {
        "subnet": Outcome.DELETED,
        "vpc": Outcome.DELETED,
    }


def test_kinds_the_tagging_api_misses_are_found_by_both_discoveries_and_deleted(gamma: Gamma) -> None:
    """Elastic IPs, launch templates, VPC endpoints, classic load balancers and IAM: moto's tagging API
    returns none of them (nor, for IAM, does AWS's)."""
    aws = gamma.pool.for_region(REGION)
    tags = owned("gamma", gamma.store.uid)
    tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
    endpoint = aws.ec2.raw.create_vpc_endpoint(
        VpcId=gamma.vpc,
        ServiceName="com.amazonaws.us-east-1.s3",
        VpcEndpointType="Gateway",  # moto cannot delete an endpoint made without a type
        TagSpecifications=tag_spec("vpc-endpoint", tags),
    )["VpcEndpoint"]["VpcEndpointId"]
    aws.client("elb").raw.create_load_balancer(
        LoadBalancerName="gamma-classic",
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 6443, "InstancePort": 6443}],
        Subnets=[gamma.subnet],
        Tags=tag_list,
    )
    iam = aws.client("iam").raw
    iam.create_role(RoleName="gamma-nodes", AssumeRolePolicyDocument="{}", Tags=tag_list)
    iam.put_role_policy(RoleName="gamma-nodes", PolicyName="inline", PolicyDocument=POLICY)
    iam.create_instance_profile(InstanceProfileName="gamma-nodes", Tags=tag_list)
    iam.add_role_to_instance_profile(InstanceProfileName="gamma-nodes", RoleName="gamma-nodes")
    wanted = {
        ("vpc-endpoint", endpoint),
        ("classic-load-balancer", "gamma-classic"),
        ("iam-role", "gamma-nodes"),
        ("iam-instance-profile", "gamma-nodes"),
    }
    reports = {
        mode: run_audit(gamma.store, gamma.pool, AuditOptions(clusters=frozenset({"gamma"}), discovery=mode))
        for mode in DiscoveryMode
    }
    for mode, report in reports.items():
        found = {(r.kind, r.id): r.classification for r in report.rows}
        assert {key: found.get(key) for key in wanted} == dict.fromkeys(
            wanted, AuditClass.ORPHAN_CLUSTER_GONE
        ), mode
    deletion = delete_leaks(reports[DiscoveryMode.TAGGING_API], gamma.store, gamma.pool, FAST)
    assert not deletion.failed, deletion.failed
    assert wanted <= {(r.kind, r.id) for r in deletion.results if r.removed}
    assert not run_audit(gamma.store, gamma.pool, AuditOptions(clusters=frozenset({"gamma"}))).rows
    assert not iam.list_roles()["Roles"]


def test_hosted_zones_their_record_sets_and_buckets_are_found_and_deleted_record_sets_first(
    gamma: Gamma,
) -> None:
    """Route 53 and S3 are listed once per audit in both modes; a record set is a part of its zone and goes
    before it (the zone refuses its delete while it holds one); a bucket is emptied, then deleted."""
    aws = gamma.pool.for_region(REGION)
    tags = owned("gamma", gamma.store.uid)
    tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
    route53 = aws.client("route53").raw
    zone = route53.create_hosted_zone(
        Name="gamma.capa.internal.",
        CallerReference="gamma-zone",
        VPC={"VPCRegion": REGION, "VPCId": gamma.vpc},
        HostedZoneConfig={"PrivateZone": True, "Comment": ""},
    )["HostedZone"]["Id"].rsplit("/", 1)[-1]
    route53.change_tags_for_resource(ResourceType="hostedzone", ResourceId=zone, AddTags=tag_list)
    record = {"Name": "api.gamma.capa.internal.", "Type": "CNAME", "TTL": 300}
    route53.change_resource_record_sets(
        HostedZoneId=zone,
        ChangeBatch={
            "Changes": [
                {
                    "Action": "UPSERT",
                    "ResourceRecordSet": {**record, "ResourceRecords": [{"Value": "lb.example"}]},
                }
            ]
        },
    )
    s3 = aws.client("s3").raw
    s3.create_bucket(Bucket="gamma-capa-py-bucket")
    s3.put_bucket_tagging(Bucket="gamma-capa-py-bucket", Tagging={"TagSet": tag_list})
    s3.put_object(Bucket="gamma-capa-py-bucket", Key="bootstrap/node-0", Body=b"not a secret")
    s3.create_bucket(Bucket="someone-elses-bucket")
    record_id = f"{zone}|api.gamma.capa.internal.|CNAME"
    wanted = {("hosted-zone", zone), ("record-set", record_id), ("bucket", "gamma-capa-py-bucket")}

    reports = {
        mode: run_audit(gamma.store, gamma.pool, AuditOptions(clusters=frozenset({"gamma"}), discovery=mode))
        for mode in DiscoveryMode
    }
    for mode, report in reports.items():
        found = {(r.kind, r.id): r.classification for r in report.rows}
        assert {key: found.get(key) for key in wanted} == dict.fromkeys(
            wanted, AuditClass.ORPHAN_CLUSTER_GONE
        ), mode
        assert ("bucket", "someone-elses-bucket") not in found, "a bucket no cluster owns is not listed"

    deletion = delete_leaks(reports[DiscoveryMode.DESCRIBE], gamma.store, gamma.pool, FAST)

    assert not deletion.failed, deletion.failed
    order = [(r.kind, r.id) for r in deletion.results if r.removed]
    assert wanted <= set(order)
    assert (
        order.index(("record-set", record_id))
        < order.index(("hosted-zone", zone))
        < order.index(("vpc", gamma.vpc))
    ), order
    assert not route53.list_hosted_zones()["HostedZones"]
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["someone-elses-bucket"]
    assert not run_audit(gamma.store, gamma.pool, AuditOptions(clusters=frozenset({"gamma"}))).rows
