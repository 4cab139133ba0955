"""Strategy class 3, separate tagging without a token (design "option 2"): VPC and internet gateway with
``tag_on_create`` lowered, against plain moto.

The design's edge case coverage: (1) a failed tag alone is reconciled by the update flow; (2) a failed
status write alone is retried and the next attempt finds the tagged resource — both failing roll the
create back; (3) a failed rollback is logged prominently and raised as non-retryable, the resource
orphaned; (4) a crash before recording orphans the resource, a crash after recording is reconciled by the
update. The engine does better than the design where it can: the intent it writes before creating lets a
restart adopt what the interrupted create made (for kinds that can list candidates, such as VPCs).
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import Transient
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import PREEXISTING
from capa_py.engine.errors import NonRetryableError, RetryableError, RollbackFailed
from capa_py.engine.tags import managed_tags
from capa_py.engine.traits import StrategyClass
from tests.engine.support import (
    SUBJECTS,
    Faults,
    Owner,
    SimulatedCrash,
    carries_lookup_tags,
    engine_for,
    intents,
    records,
)
from tests.resources.builders import CLUSTER, Builder

VPC = SUBJECTS["vpc"]
IGW = SUBJECTS["internet-gateway"]
ENGINE = engine_for(3, VPC.kind, IGW.kind, SUBJECTS["elastic-ip"].kind)


def _untagged_vpc(aws: AWSClients, cidr: str) -> str:
    """A VPC nobody manages (a user's, or one an earlier interrupted create left behind)."""
    return str(aws.ec2.call("CreateVpc", CidrBlock=cidr)["Vpc"]["VpcId"])


def test_class3_overrides_select_separate_tagging_without_token(aws: AWSClients) -> None:
    for subject in (VPC, IGW, SUBJECTS["elastic-ip"]):
        assert ENGINE.strategy(subject.cls(aws)) == StrategyClass.SEPARATE_TAGGING_NO_TOKEN, subject.kind


def test_class3_vpc_tagging_failure_keeps_the_record_and_the_update_tags_it(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    faults.fail(aws, "CreateTags")
    delete = faults.watch(aws, VPC.delete_operation)

    with pytest.raises(RetryableError, match="tagging failed"):
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    found = live(aws)
    assert len(found) == 1, f"one VPC expected: {found}"
    (vpc_id,) = found
    assert not carries_lookup_tags(found[vpc_id], VPC.role)
    status = owner.status()
    assert (status.resources[VPC.role].id, status.resources[VPC.role].tags_complete) == (vpc_id, False)
    assert VPC.role not in status.intents, "recording the id settles the intent"
    assert delete.seen == 0, "only tagging failed: the recorded VPC must be kept"

    faults.clear()
    ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert managed_tags(CLUSTER, VPC.role).items() <= live(aws)[vpc_id].items(), "the update flow tags it"
    assert owner.status().resources[VPC.role].tags_complete
    assert live(aws).keys() == {vpc_id}


def test_class3_vpc_status_write_failure_keeps_the_tagged_vpc_and_the_retry_adopts_it_by_tags(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    owner.store.fail_status_writes(records(VPC.role))
    delete = faults.watch(aws, VPC.delete_operation)

    with pytest.raises(RetryableError, match="recording failed, the next attempt finds it by tags"):
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    (vpc_id,) = live(aws)
    assert carries_lookup_tags(live(aws)[vpc_id], VPC.role), "tagging succeeded, so the VPC is findable"
    assert delete.seen == 0, "only recording failed: the tagged VPC must be kept"
    assert VPC.role not in owner.status().resources

    owner.store.heal()
    with call_scope() as calls:
        observed = ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert observed.id == vpc_id
    assert calls.by_operation().get("ec2:CreateVpc", 0) == 0, "the retry adopts by tags, it does not create"
    status = owner.status()
    assert (status.resources[VPC.role].id, status.resources[VPC.role].tags_complete) == (vpc_id, True)
    assert VPC.role not in status.intents
    assert live(aws).keys() == {vpc_id}


def test_class3_vpc_both_record_and_tag_fail_rolls_back(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    owner.store.fail_status_writes(records(VPC.role))
    faults.fail(aws, "CreateTags")
    delete = faults.watch(aws, VPC.delete_operation)

    with capture_logs() as logs, pytest.raises(RetryableError, match="rolled back") as failure:
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert type(failure.value) is RetryableError, "a successful rollback is retryable"
    assert delete.seen == 1, "neither recorded nor tagged: the VPC must be deleted"
    assert live(aws) == {}, "the rollback must leave no VPC behind"
    assert any(e["event"].startswith("rolled back") and e["log_level"] == "warning" for e in logs), logs

    owner.store.heal()
    faults.clear()
    observed = ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert live(aws).keys() == {observed.id}
    assert owner.status().resources[VPC.role].id == observed.id


def test_class3_vpc_rollback_delete_failure_raises_rollback_failed_and_logs_the_orphan(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    owner.store.fail_status_writes(records(VPC.role))
    faults.fail(aws, "CreateTags")
    delete = faults.fail(aws, VPC.delete_operation)

    with capture_logs() as logs, pytest.raises(RollbackFailed) as failure:
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    (orphan_id,) = live(aws)
    assert delete.fired == 1
    assert isinstance(failure.value, NonRetryableError), "an orphan needs a human: not retryable"
    assert (failure.value.resource_id, failure.value.kind) == (orphan_id, "vpc")
    assert orphan_id in str(failure.value)
    orphan_logs = [e for e in logs if e["log_level"] == "error" and e.get("resource_id") == orphan_id]
    assert orphan_logs, f"no error log line names the orphan: {logs}"
    assert "ORPHANED" in orphan_logs[0]["event"], "the orphan log line must stand out"
    assert not carries_lookup_tags(live(aws)[orphan_id], VPC.role), "the orphan is untagged"
    assert VPC.role not in owner.status().resources

    # Beyond the design: the intent written before the create still names this attempt, so once the
    # store is back the orphan is adopted instead of a second VPC being made.
    owner.store.heal()
    faults.clear()
    observed = ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert observed.id == orphan_id, "the intent must lead the next attempt to the orphan"
    assert live(aws).keys() == {orphan_id}
    assert carries_lookup_tags(live(aws)[orphan_id], VPC.role)


def test_class3_vpc_crash_after_create_is_adopted_through_the_intent_after_restart(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    users_vpc = _untagged_vpc(aws, desired.cidr_block)  # same CIDR, not ours: must never be adopted
    faults.crash_after(aws, VPC.create_operation)

    with pytest.raises(SimulatedCrash):
        engine_for(3, VPC.kind).ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    status = owner.status()
    assert VPC.role not in status.resources
    intent = status.intents[VPC.role]
    assert intent.kind == "vpc"
    assert intent.request["cidr_block"] == desired.cidr_block
    assert intent.request[PREEXISTING] == users_vpc, "the intent lists the candidates that already existed"
    (created_id,) = live(aws).keys() - {users_vpc}
    assert not carries_lookup_tags(live(aws)[created_id], VPC.role), "nothing to find it by tags"
    faults.clear()

    with capture_logs() as logs:
        observed = engine_for(3, VPC.kind).ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert observed.id == created_id, "the restart must adopt the VPC the interrupted create made"
    assert live(aws).keys() == {users_vpc, created_id}, "no third VPC"
    assert not carries_lookup_tags(live(aws)[users_vpc], VPC.role), "the user's VPC is left alone"
    assert carries_lookup_tags(live(aws)[created_id], VPC.role)
    status = owner.status()
    assert status.resources[VPC.role].id == created_id
    assert VPC.role not in status.intents
    assert any(e["event"].startswith("adopting") and e.get("resource_id") == created_id for e in logs), logs


def test_class3_vpc_crash_after_record_before_tagging_is_tagged_by_the_update_after_restart(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    faults.crash_before(aws, "CreateTags")

    with pytest.raises(SimulatedCrash):
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())
    recorded = owner.status().resources[VPC.role]
    assert not recorded.tags_complete

    with call_scope() as calls:
        engine_for(3, VPC.kind).ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert calls.by_operation().get("ec2:CreateVpc", 0) == 0
    assert live(aws).keys() == {recorded.id}
    assert carries_lookup_tags(live(aws)[recorded.id], VPC.role)
    assert owner.status().resources[VPC.role].tags_complete


def test_class3_internet_gateway_crash_before_record_orphans_it_as_the_design_allows(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    """An internet gateway has no attributes to recognise it by (no candidates), so the intent cannot
    find it: the design's "minor mitigation" — the first gateway is orphaned, untagged."""
    desired, live = IGW.prepare(build)
    faults.crash_after(aws, IGW.create_operation)

    with pytest.raises(SimulatedCrash):
        ENGINE.ensure(IGW.cls(aws), IGW.role, desired, owner.scope())
    (orphan_id,) = live(aws)
    faults.clear()

    observed = ENGINE.ensure(IGW.cls(aws), IGW.role, desired, owner.scope())

    found = live(aws)
    assert observed.id != orphan_id, "nothing can lead a restart to the untagged gateway"
    assert found.keys() == {orphan_id, observed.id}, found
    assert not carries_lookup_tags(found[orphan_id], IGW.role), "the orphan stays untagged"
    assert owner.status().resources[IGW.role].id == observed.id


def test_class3_vpc_lost_create_response_is_not_retried_and_the_next_attempt_adopts_it(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    lost = faults.lose_response(aws, VPC.create_operation)

    with pytest.raises(Transient):
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())
    assert lost.seen == 1, "a create without a token is never repeated on a 5xx: it may have happened"
    (created_id,) = live(aws)

    observed = ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert observed.id == created_id, "the intent leads the next attempt to the VPC"
    assert live(aws).keys() == {created_id}


def test_class3_intent_write_failure_creates_nothing(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = VPC.prepare(build)
    owner.store.fail_status_writes(intents(VPC.role))
    creates = faults.watch(aws, VPC.create_operation)

    with pytest.raises(RetryableError, match="cannot write the intent; nothing was created"):
        ENGINE.ensure(VPC.cls(aws), VPC.role, desired, owner.scope())

    assert creates.seen == 0
    assert live(aws) == {}
