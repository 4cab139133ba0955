"""The update flow (a recorded id) and drift.

Update: describe the recorded id, add the managed and additional tags it misses (one CreateTags with only
those), leave tags others added alone, bring mutable attributes to the desired state, and never tag or
change a resource shared with the cloud provider. Drift: a recorded id AWS no longer knows is created again
— unless it was created so recently that AWS may simply not show it yet (the profile's consistency window).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from structlog.testing import capture_logs

from capa_py.api.aws import RecordedResource
from capa_py.api.meta import utcnow
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError, Waiting
from capa_py.engine.profiles import MOTO, EndpointProfile
from capa_py.engine.tags import NAME_TAG, ROLE_TAG, cloud_provider_tag_key, cluster_tag_key, managed_tags
from resources.route_table import RouteTableAssociation, RouteTableAssociationDesired
from resources.vpc import Vpc, VpcDesired
from tests.engine.support import Faults, Owner, engine_for, vpcs
from tests.resources.builders import CLUSTER, Builder

ROLE = "vpc"
DESIRED = VpcDesired("10.30.0.0/16")
ENGINE = Engine(MOTO)
EVENTUAL = EndpointProfile("moto-eventual", MOTO.overrides, consistency_window=60.0)
"""moto as if it were eventually consistent: a just-created resource may not be visible for a minute."""


def _delete_tags(aws: AWSClients, resource_id: str, *keys: str) -> None:
    aws.ec2.call("DeleteTags", Resources=[resource_id], Tags=[{"Key": k} for k in keys])


def _add_tags(aws: AWSClients, resource_id: str, tags: dict[str, str]) -> None:
    aws.ec2.call(
        "CreateTags", Resources=[resource_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
    )


def test_update_describes_the_recorded_id_and_changes_nothing_in_sync(aws: AWSClients, owner: Owner) -> None:
    created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    with call_scope() as calls:
        observed = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    assert observed.id == created.id
    operations = calls.by_operation()
    assert operations.get("ec2:DescribeVpcs") == 1, f"one describe, by the recorded id: {operations}"
    assert calls.mutating_operations() == {}, "a resource in sync needs no write"
    assert vpcs(aws).keys() == {created.id}


def test_update_restores_missing_managed_tags_and_leaves_user_tags_alone(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    _delete_tags(aws, created.id, NAME_TAG, ROLE_TAG)
    _add_tags(aws, created.id, {"owner-note": "do not touch"})
    tagging = faults.watch(aws, "CreateTags")

    ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    (request,) = tagging.params
    assert sorted(t["Key"] for t in request["Tags"]) == sorted([NAME_TAG, ROLE_TAG]), "only the missing tags"
    tags = vpcs(aws)[created.id]
    assert managed_tags(CLUSTER, ROLE).items() <= tags.items()
    assert tags["owner-note"] == "do not touch", "tags the user added must survive"


def test_update_applies_changed_additional_tags_without_touching_user_tags(
    aws: AWSClients, owner: Owner
) -> None:
    created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope(additional_tags={"cost-center": "1"}))
    _add_tags(aws, created.id, {"owner-note": "keep"})

    ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope(additional_tags={"cost-center": "2", "env": "dev"}))

    tags = vpcs(aws)[created.id]
    assert (tags["cost-center"], tags["env"], tags["owner-note"]) == ("2", "dev", "keep"), tags
    assert vpcs(aws).keys() == {created.id}


def test_update_tagging_failure_records_incomplete_tags_and_requeues(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    _delete_tags(aws, created.id, NAME_TAG)
    faults.fail(aws, "CreateTags")

    with pytest.raises(RetryableError, match="tagging failed"):
        ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    assert not owner.status().resources[ROLE].tags_complete, "the status must say tags are missing"

    faults.clear()
    ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].tags_complete
    assert vpcs(aws)[created.id][NAME_TAG] == f"{CLUSTER}-{ROLE}"


def test_update_brings_mutable_attributes_to_the_desired_state(aws: AWSClients, owner: Owner) -> None:
    created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    aws.ec2.call("ModifyVpcAttribute", VpcId=created.id, EnableDnsHostnames={"Value": False})

    ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    hostnames = aws.ec2.call("DescribeVpcAttribute", VpcId=created.id, Attribute="enableDnsHostnames")
    assert hostnames["EnableDnsHostnames"]["Value"] is True, "the update must turn DNS hostnames back on"


def test_shared_with_cloud_provider_is_created_with_both_tags_then_never_tagged_or_updated(
    aws: AWSClients, owner: Owner
) -> None:
    with call_scope() as creating:
        created = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope(), shared_with_cloud_provider=True)
    tags = vpcs(aws)[created.id]
    assert tags[cluster_tag_key(CLUSTER)] == "owned"
    assert tags[cloud_provider_tag_key(CLUSTER)] == "owned"
    assert "ec2:ModifyVpcAttribute" not in creating.by_operation(), "create/delete only: no attribute update"

    _delete_tags(aws, created.id, NAME_TAG)
    aws.ec2.call("ModifyVpcAttribute", VpcId=created.id, EnableDnsSupport={"Value": False})
    scope = owner.scope(additional_tags={"team": "platform"})
    with call_scope() as updating:
        observed = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, scope, shared_with_cloud_provider=True)

    assert observed.id == created.id
    assert updating.mutating_operations() == {}, "a shared resource is handed off: no tag, no update"
    assert NAME_TAG not in vpcs(aws)[created.id]
    assert "team" not in vpcs(aws)[created.id]


def test_recorded_resource_deleted_behind_our_back_is_created_again_under_moto(
    aws: AWSClients, owner: Owner
) -> None:
    assert MOTO.consistency_window == 0
    first = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    aws.ec2.call("DeleteVpc", VpcId=first.id)

    with capture_logs() as logs:
        second = ENGINE.ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    assert second.id != first.id
    assert vpcs(aws).keys() == {second.id}
    assert owner.status().resources[ROLE].id == second.id
    assert any(e["log_level"] == "warning" and e.get("resource_id") == first.id for e in logs), logs


def test_recorded_resource_missing_within_the_consistency_window_waits_instead_of_duplicating(
    aws: AWSClients, owner: Owner
) -> None:
    first = Engine(EVENTUAL).ensure(Vpc(aws), ROLE, DESIRED, owner.scope())
    aws.ec2.call("DeleteVpc", VpcId=first.id)  # to the engine: not visible *yet*

    with pytest.raises(Waiting, match="not visible yet") as waiting:
        Engine(EVENTUAL).ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    assert waiting.value.requeue_after > 0
    assert vpcs(aws) == {}, "creating now could duplicate a VPC AWS has not shown yet"
    assert owner.status().resources[ROLE].id == first.id, "the record is kept while waiting"


def test_recorded_resource_missing_after_the_consistency_window_is_created_again(
    aws: AWSClients, owner: Owner
) -> None:
    long_ago = utcnow() - timedelta(hours=2)
    gone = RecordedResource(
        kind="vpc", id="vpc-0123456789abcdef0", strategy="tag-on-create", created_at=long_ago
    )
    owner.scope().recorder.record(ROLE, gone)

    observed = Engine(EVENTUAL).ensure(Vpc(aws), ROLE, DESIRED, owner.scope())

    assert observed.id != gone.id
    assert vpcs(aws).keys() == {observed.id}
    assert owner.status().resources[ROLE].id == observed.id


def test_update_that_changes_the_id_records_the_new_id(aws: AWSClients, build: Builder, owner: Owner) -> None:
    vpc_id = build.vpc().id
    subnet_id = build.subnet(vpc_id).id
    first_table, second_table = build.route_table(vpc_id).id, build.route_table(vpc_id).id
    role = "public-subnet-a-association"
    first = ENGINE.ensure(
        RouteTableAssociation(aws), role, RouteTableAssociationDesired(first_table, subnet_id), owner.scope()
    )

    moved = ENGINE.ensure(
        RouteTableAssociation(aws), role, RouteTableAssociationDesired(second_table, subnet_id), owner.scope()
    )

    assert moved.id != first.id, "ReplaceRouteTableAssociation gives the association a new id"
    assert owner.status().resources[role].id == moved.id, "the new id must be recorded"
    assert RouteTableAssociation(aws).describe_by_id(moved.id) is not None


@pytest.mark.parametrize("strategy", [2, 3])
def test_shared_resource_whose_create_tagging_failed_gets_its_tags_then_is_handed_off(
    strategy: int, aws_tokens: AWSClients, owner: Owner, faults: Faults
) -> None:
    """ "Never tag a shared resource" is about after the handoff: the tags of its own creation (owned, and
    the cloud provider's) must still arrive, or the cloud provider never sees it."""
    engine = engine_for(strategy, "vpc")
    faults.fail(aws_tokens, "CreateTags", times=1)
    with pytest.raises(RetryableError, match="tagging failed"):
        engine.ensure(Vpc(aws_tokens), ROLE, DESIRED, owner.scope(), shared_with_cloud_provider=True)
    assert not owner.status().resources[ROLE].tags_complete

    observed = engine.ensure(Vpc(aws_tokens), ROLE, DESIRED, owner.scope(), shared_with_cloud_provider=True)

    tags = vpcs(aws_tokens)[observed.id]
    assert tags.get(cloud_provider_tag_key(CLUSTER)) == "owned", f"the creation's tags must arrive: {tags}"
    assert tags.get(cluster_tag_key(CLUSTER)) == "owned"
    assert owner.status().resources[ROLE].tags_complete
    _delete_tags(aws_tokens, observed.id, NAME_TAG)
    with call_scope() as calls:
        engine.ensure(Vpc(aws_tokens), ROLE, DESIRED, owner.scope(), shared_with_cloud_provider=True)
    assert calls.mutating_operations() == {}, "once its tags are complete, a shared resource is left alone"
