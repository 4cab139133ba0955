"""Strategy class 4, client token without tags: route table and NAT gateway with ``tag_on_create`` and
``taggable`` lowered and ``client_token`` raised, against the moto server that honours ``ClientToken``.

The design's edge case coverage: (1) there is no tagging; (2) a failed status write is retried and the same
token returns the same resource; (3) no delete is ever attempted; (4) after a crash the same token returns
the resource the interrupted create made.
"""

from __future__ import annotations

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.errors import RetryableError
from capa_py.engine.tokens import client_token
from capa_py.engine.traits import StrategyClass
from tests.engine.support import SUBJECTS, Faults, Owner, SimulatedCrash, Subject, engine_for, records
from tests.resources.builders import Builder

TABLE = SUBJECTS["route-table"]


@pytest.fixture(params=[TABLE, SUBJECTS["nat-gateway"]], ids=str)
def subject(request: pytest.FixtureRequest) -> Subject:
    return request.param  # type: ignore[no-any-return]


def test_class4_overrides_select_token_only(aws_tokens: AWSClients, subject: Subject) -> None:
    engine = engine_for(4, subject.kind)
    assert engine.strategy(subject.cls(aws_tokens)) == StrategyClass.TOKEN_NO_TAGS


def test_class4_creates_untagged_and_never_calls_create_tags(
    subject: Subject, aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build_tokens)
    create_tags = faults.fail(aws_tokens, "CreateTags")
    creates = faults.watch(aws_tokens, subject.create_operation)

    observed = engine_for(4, subject.kind).ensure(
        subject.cls(aws_tokens), subject.role, desired, owner.scope()
    )

    assert create_tags.seen == 0, "class 4 has no tagging to fail"
    found = live(aws_tokens)
    assert found == {observed.id: {}}, f"one untagged {subject.kind} expected: {found}"
    (params,) = creates.params
    assert params["ClientToken"] == client_token(owner.uid, subject.role)
    assert "TagSpecifications" not in params
    recorded = owner.status().resources[subject.role]
    assert (recorded.id, recorded.strategy, recorded.tags_complete) == (observed.id, "token-only", True)


def test_class4_failed_status_write_is_retried_with_the_same_token_and_gets_the_same_table(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = TABLE.prepare(build_tokens)
    owner.store.fail_status_writes(records(TABLE.role))
    delete = faults.fail(aws_tokens, TABLE.delete_operation)

    with pytest.raises(RetryableError, match="recording failed") as failure:
        engine_for(4, TABLE.kind).ensure(TABLE.cls(aws_tokens), TABLE.role, desired, owner.scope())
    assert type(failure.value) is RetryableError
    assert delete.seen == 0, "class 4 never deletes on a failed status write"
    (table_id,) = live(aws_tokens)

    owner.store.heal()
    observed = engine_for(4, TABLE.kind).ensure(TABLE.cls(aws_tokens), TABLE.role, desired, owner.scope())

    assert observed.id == table_id, "the same token must return the same route table"
    assert live(aws_tokens).keys() == {table_id}
    assert owner.status().resources[TABLE.role].id == table_id


def test_class4_crash_after_create_gets_the_same_resource_by_token_after_restart(
    subject: Subject, aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build_tokens)
    faults.crash_after(aws_tokens, subject.create_operation)

    with pytest.raises(SimulatedCrash):
        engine_for(4, subject.kind).ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    (created_id,) = live(aws_tokens)
    assert owner.status().resources == {}
    assert owner.status().intents == {}, "a token needs no intent"
    faults.clear()

    observed = engine_for(4, subject.kind).ensure(
        subject.cls(aws_tokens), subject.role, desired, owner.scope()
    )

    assert observed.id == created_id
    assert live(aws_tokens).keys() == {created_id}, f"exactly one {subject.kind}"
    assert owner.status().resources[subject.role].id == created_id


def test_class4_update_never_tags(aws_tokens: AWSClients, build_tokens: Builder, owner: Owner) -> None:
    desired, live = TABLE.prepare(build_tokens)
    engine = engine_for(4, TABLE.kind)
    observed = engine.ensure(TABLE.cls(aws_tokens), TABLE.role, desired, owner.scope())

    with call_scope() as calls:
        engine.ensure(TABLE.cls(aws_tokens), TABLE.role, desired, owner.scope(additional_tags={"team": "x"}))

    assert calls.mutating_operations() == {}, "a recorded untaggable resource needs no call but describe"
    assert live(aws_tokens) == {observed.id: {}}
