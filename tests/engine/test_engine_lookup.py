"""How the engine finds what already exists before it creates: by the owned + role tags (never by tags users
change), by natural key (refusing keys held by resources it does not own), oldest first among duplicates.
"""

from __future__ import annotations

import time

import pytest
from structlog.testing import capture_logs

from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import NaturalKeyTaken, NonRetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import managed_tags
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired
from tests.engine.support import (
    Faults,
    Owner,
    carries_lookup_tags,
    engine_for,
    nat_gateways,
    records,
    subnets,
    vpcs,
)
from tests.resources.builders import ZONE, Builder

ENGINE = Engine(MOTO)


@pytest.mark.parametrize(
    "holder_tags",
    [{}, managed_tags("beta", "public-subnet-a")],
    ids=["untagged", "another-cluster"],
)
def test_natural_key_held_by_an_unowned_subnet_is_natural_key_taken(
    holder_tags: dict[str, str], aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    vpc_id = build.vpc().id
    desired = SubnetDesired(vpc_id, "10.0.9.0/24", ZONE)
    holder = Subnet(aws).create(desired, holder_tags, None)
    creates = faults.watch(aws, "CreateSubnet")

    with pytest.raises(NaturalKeyTaken) as failure:
        ENGINE.ensure(Subnet(aws), "public-subnet-a", desired, owner.scope())

    assert isinstance(failure.value, NonRetryableError), "renaming or removing needs a human"
    assert holder.id in str(failure.value), "the message must name the resource holding the key"
    assert creates.seen == 0
    assert subnets(aws, vpc_id).keys() == {holder.id}
    assert subnets(aws, vpc_id)[holder.id] == holder_tags, "the holder must not be tagged or adopted"
    assert owner.status().resources == {}


def test_several_tagged_duplicates_adopt_the_oldest_and_warn(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    role = "nat-gateway-a"
    subnet_id = build.subnet(public=True).id
    tags = managed_tags("alpha", role, store_uid=owner.store.uid)
    older = NatGateway(aws).create(NatGatewayDesired(subnet_id, build.elastic_ip().id), tags, None)
    time.sleep(1.05 - time.time() % 1.0)  # EC2 reports creation times to the second: cross into the next
    newer = NatGateway(aws).create(NatGatewayDesired(subnet_id, build.elastic_ip().id), tags, None)
    assert older.created_at is not None
    assert newer.created_at is not None
    assert older.created_at < newer.created_at, "moto must report distinct creation times"
    # The desired gateway is the newer one's twin: adoption goes by age, never by attributes.
    desired = NatGatewayDesired(subnet_id, newer.attributes["allocation_ids"][0])

    with capture_logs() as logs:
        observed = ENGINE.ensure(NatGateway(aws), role, desired, owner.scope())

    assert observed.id == older.id, "the oldest duplicate must be adopted"
    assert nat_gateways(aws).keys() == {older.id, newer.id}, "nothing created, nothing deleted"
    assert owner.status().resources[role].id == older.id
    warnings = [e for e in logs if e["log_level"] == "warning" and e.get("adopted") == older.id]
    assert warnings, f"adopting among duplicates must warn: {logs}"
    assert warnings[0]["others"] == [newer.id], "the warning must name the other duplicates"


def test_changing_additional_tags_never_breaks_lookup_by_tags(aws: AWSClients, owner: Owner) -> None:
    desired = VpcDesired("10.40.0.0/16")
    owner.store.fail_status_writes(records("vpc"), times=1)  # unrecorded: the next run must find it by tags
    with pytest.raises(Exception, match="recording failed"):
        ENGINE.ensure(Vpc(aws), "vpc", desired, owner.scope(additional_tags={"team": "red"}))
    (vpc_id,) = vpcs(aws)

    adopted = ENGINE.ensure(Vpc(aws), "vpc", desired, owner.scope(additional_tags={"team": "blue"}))
    assert adopted.id == vpc_id, "user tags are not part of the lookup"
    # Class 1 adopts as it finds (the design's create flow); the update flow then reconciles the tags.
    ENGINE.ensure(Vpc(aws), "vpc", desired, owner.scope(additional_tags={"team": "blue"}))

    assert vpcs(aws).keys() == {vpc_id}
    assert vpcs(aws)[vpc_id]["team"] == "blue"


def test_class3_adoption_by_tags_applies_changed_additional_tags_at_once(
    aws: AWSClients, owner: Owner
) -> None:
    engine = engine_for(3, "vpc")
    desired = VpcDesired("10.40.0.0/16")
    owner.store.fail_status_writes(records("vpc"))
    with pytest.raises(Exception, match="recording failed"):
        engine.ensure(Vpc(aws), "vpc", desired, owner.scope(additional_tags={"team": "red"}))
    owner.store.heal()
    (vpc_id,) = vpcs(aws)

    adopted = engine.ensure(Vpc(aws), "vpc", desired, owner.scope(additional_tags={"team": "blue"}))

    assert adopted.id == vpc_id
    assert vpcs(aws) == {vpc_id: {**vpcs(aws)[vpc_id], "team": "blue"}}


def test_lookup_by_tags_is_scoped_to_the_cluster_and_role(aws: AWSClients, owner: Owner) -> None:
    desired = VpcDesired("10.50.0.0/16")
    theirs = Vpc(aws).create(desired, managed_tags("beta", "vpc"), None)
    other_role = Vpc(aws).create(desired, managed_tags("alpha", "shared-services-vpc"), None)

    ours = ENGINE.ensure(Vpc(aws), "vpc", desired, owner.scope())

    assert ours.id not in (theirs.id, other_role.id)
    assert vpcs(aws).keys() == {theirs.id, other_role.id, ours.id}
    assert carries_lookup_tags(vpcs(aws)[ours.id], "vpc")


@pytest.mark.parametrize("strategy", [3, 5])
def test_natural_key_held_by_another_cluster_is_never_adopted_whatever_the_strategy(
    strategy: int, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    """Classes 2-5 adopt an untagged keyed resource (their own may be untagged after a crash), but one
    another cluster owns would then be managed — and deleted — by two clusters."""
    vpc_id = build.vpc().id
    desired = SubnetDesired(vpc_id, "10.0.9.0/24", ZONE)
    foreign_tags = managed_tags("beta", "public-subnet-a")
    holder = Subnet(aws).create(desired, foreign_tags, None)

    with pytest.raises(NaturalKeyTaken, match=holder.id):
        engine_for(strategy, "subnet").ensure(Subnet(aws), "public-subnet-a", desired, owner.scope())

    assert subnets(aws, vpc_id) == {holder.id: foreign_tags}, "the other cluster's subnet is untouched"
    assert owner.status().resources == {}
