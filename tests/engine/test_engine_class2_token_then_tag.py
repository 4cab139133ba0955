"""Strategy class 2, client token with separate tagging: NAT gateway (and route table, instance) with
``tag_on_create`` lowered and ``client_token`` raised, against the moto server that honours ``ClientToken``.

The design's edge case coverage: (1) a failed tag is reconciled by the update flow; (2) a failed status
write is retried and the same token returns the same resource; (3) no delete is ever attempted; (4) after a
crash the same token returns the resource the interrupted create made.
"""

from __future__ import annotations

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError
from capa_py.engine.tags import managed_tags
from capa_py.engine.tokens import client_token
from capa_py.engine.traits import StrategyClass
from tests.engine.support import (
    SUBJECTS,
    Faults,
    Owner,
    SimulatedCrash,
    Subject,
    carries_lookup_tags,
    engine_for,
    records,
)
from tests.resources.builders import CLUSTER, Builder

NAT = SUBJECTS["nat-gateway"]


def _engine(subject: Subject = NAT) -> Engine:
    return engine_for(2, subject.kind)


@pytest.fixture(params=[NAT, SUBJECTS["route-table"], SUBJECTS["instance"]], ids=str)
def token_subject(request: pytest.FixtureRequest) -> Subject:
    return request.param  # type: ignore[no-any-return]


def test_class2_overrides_select_token_then_tag(aws_tokens: AWSClients, token_subject: Subject) -> None:
    strategy = _engine(token_subject).strategy(token_subject.cls(aws_tokens))
    assert strategy == StrategyClass.TOKEN_SEPARATE_TAGGING, token_subject.kind


def test_class2_tagging_failure_is_recorded_incomplete_and_reconciled_by_the_update(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = NAT.prepare(build_tokens)
    faults.fail(aws_tokens, "CreateTags")

    with pytest.raises(RetryableError, match="tagging failed"):
        _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())

    found = live(aws_tokens)
    assert len(found) == 1, f"one NAT gateway expected: {found}"
    (gateway_id,) = found
    assert not carries_lookup_tags(found[gateway_id], NAT.role), "tagging was refused"
    recorded = owner.status().resources[NAT.role]
    assert (recorded.id, recorded.tags_complete, recorded.strategy) == (
        gateway_id,
        False,
        "token+separate-tagging",
    ), "the id must be recorded before tagging, marked as missing its tags"

    faults.clear()
    with call_scope() as calls:
        observed = _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())

    assert observed.id == gateway_id
    assert calls.by_operation().get("ec2:CreateNatGateway", 0) == 0, "the update flow must not create"
    tags = live(aws_tokens)[gateway_id]
    assert managed_tags(CLUSTER, NAT.role).items() <= tags.items(), f"the update flow must tag: {tags}"
    assert owner.status().resources[NAT.role].tags_complete
    assert len(live(aws_tokens)) == 1


def test_class2_failed_status_write_is_retried_with_the_same_token_and_gets_the_same_gateway(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = NAT.prepare(build_tokens)
    creates = faults.watch(aws_tokens, "CreateNatGateway")
    tagging = faults.watch(aws_tokens, "CreateTags")
    owner.store.fail_status_writes(records(NAT.role))

    with pytest.raises(RetryableError, match="recording failed"):
        _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())
    assert tagging.seen == 0, "class 2 records before it tags: an unrecorded gateway stays untagged"
    assert NAT.role not in owner.status().resources
    (first_id,) = live(aws_tokens)

    owner.store.heal()
    observed = _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())

    assert observed.id == first_id, "the repeated create with the same token must return the same gateway"
    assert live(aws_tokens).keys() == {first_id}, "no second NAT gateway"
    tokens = [p.get("ClientToken") for p in creates.params]
    assert tokens == [client_token(owner.uid, NAT.role)] * 2, (
        f"both creates carry the owner's token: {tokens}"
    )
    recorded = owner.status().resources[NAT.role]
    assert (recorded.id, recorded.tags_complete) == (first_id, True)
    assert carries_lookup_tags(live(aws_tokens)[first_id], NAT.role)


def test_class2_never_deletes_what_it_could_not_record(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = NAT.prepare(build_tokens)
    owner.store.fail_status_writes(records(NAT.role))
    delete = faults.fail(aws_tokens, NAT.delete_operation)

    with pytest.raises(RetryableError) as failure:
        _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())

    assert type(failure.value) is RetryableError, "the token makes a retry safe: no rollback"
    assert delete.seen == 0, "class 2 never deletes on a failed status write"
    assert len(live(aws_tokens)) == 1


def test_class2_crash_after_create_gets_the_same_resource_by_token_after_restart(
    token_subject: Subject, aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = token_subject.prepare(build_tokens)
    creates = faults.watch(aws_tokens, token_subject.create_operation)
    faults.crash_after(aws_tokens, token_subject.create_operation)

    with pytest.raises(SimulatedCrash):
        _engine(token_subject).ensure(
            token_subject.cls(aws_tokens), token_subject.role, desired, owner.scope()
        )
    (orphan_id,) = live(aws_tokens)
    assert token_subject.role not in owner.status().resources

    restarted = _engine(token_subject)
    observed = restarted.ensure(token_subject.cls(aws_tokens), token_subject.role, desired, owner.scope())

    assert observed.id == orphan_id, "the restarted create must get the first resource back by its token"
    found = live(aws_tokens)
    assert found.keys() == {orphan_id}, f"exactly one {token_subject.kind}: {found}"
    assert carries_lookup_tags(found[orphan_id], token_subject.role)
    assert len({p["ClientToken"] for p in creates.params}) == 1, "the same token both times"
    recorded = owner.status().resources[token_subject.role]
    assert (recorded.id, recorded.tags_complete) == (orphan_id, True)


def test_class2_crash_between_record_and_tag_is_tagged_by_the_update_after_restart(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = NAT.prepare(build_tokens)
    faults.crash_before(aws_tokens, "CreateTags")

    with pytest.raises(SimulatedCrash):
        _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())
    recorded = owner.status().resources[NAT.role]
    assert not recorded.tags_complete, "recorded, and marked untagged, before the crash"

    with call_scope() as calls:
        observed = _engine().ensure(NAT.cls(aws_tokens), NAT.role, desired, owner.scope())

    assert observed.id == recorded.id
    assert calls.by_operation().get("ec2:CreateNatGateway", 0) == 0, "a recorded id is updated, not created"
    assert carries_lookup_tags(live(aws_tokens)[recorded.id], NAT.role)
    assert owner.status().resources[NAT.role].tags_complete
    assert len(live(aws_tokens)) == 1


def test_class2_lost_create_response_is_retried_with_the_token_and_returns_the_same_table(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS["route-table"]
    desired, live = subject.prepare(build_tokens)
    lost = faults.lose_response(aws_tokens, "CreateRouteTable")

    observed = _engine(subject).ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())

    assert lost.fired == 1
    assert lost.seen == 2, "a 5xx on a create with a token is retried by AWSClient.call"
    assert live(aws_tokens).keys() == {observed.id}, "the retry returned the first table, not a second"
    assert owner.status().resources[subject.role].id == observed.id
