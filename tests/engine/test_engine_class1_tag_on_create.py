"""Strategy class 1, tag on create: VPC, subnet and instance as declared, against moto.

The design's edge case coverage for this class: (1) no separate tagging to fail, (2) a failed status write
is retried and the next attempt finds the tagged resource, (3) no delete is ever attempted, (4) after a
crash the next attempt finds the resource by its tags. Each test also counts what exists in moto.
"""

from __future__ import annotations

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import managed_tags
from capa_py.engine.traits import StrategyClass, choose_strategy
from tests.engine.support import (
    SUBJECTS,
    Faults,
    Owner,
    SimulatedCrash,
    Subject,
    carries_lookup_tags,
    records,
)
from tests.resources.builders import CLUSTER, Builder

CASES = [SUBJECTS["vpc"], SUBJECTS["subnet"], SUBJECTS["instance"]]
ENGINE = Engine(MOTO)


@pytest.fixture(params=CASES, ids=str)
def case(request: pytest.FixtureRequest) -> Subject:
    return request.param  # type: ignore[no-any-return]


def test_class1_kinds_tag_on_create_under_moto() -> None:
    for case in CASES:
        traits = ENGINE.profile.effective(case.kind, case.cls.traits)
        assert choose_strategy(traits) == StrategyClass.TAG_ON_CREATE, f"{case.kind}: {traits.describe()}"


def test_class1_tags_arrive_with_the_create_so_a_failing_create_tags_changes_nothing(
    case: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = case.prepare(build)
    create_tags = faults.fail(aws, "CreateTags")

    observed = ENGINE.ensure(case.cls(aws), case.role, desired, owner.scope())

    assert create_tags.seen == 0, "class 1 must tag in the create call, never with CreateTags"
    found = live(aws)
    assert list(found) == [observed.id], f"exactly one {case.role} expected, found {found}"
    assert managed_tags(CLUSTER, case.role).items() <= found[observed.id].items(), found[observed.id]
    recorded = owner.status().resources[case.role]
    assert (recorded.id, recorded.strategy, recorded.tags_complete) == (observed.id, "tag-on-create", True)


def test_class1_failed_status_write_requeues_and_the_retry_adopts_the_tagged_resource(
    case: Subject, aws: AWSClients, build: Builder, owner: Owner
) -> None:
    desired, live = case.prepare(build)
    owner.store.fail_status_writes(records(case.role))

    with pytest.raises(RetryableError, match="recording failed"):
        ENGINE.ensure(case.cls(aws), case.role, desired, owner.scope())
    first = live(aws)
    assert len(first) == 1, f"the create happened once: {first}"
    (created_id,) = first
    assert carries_lookup_tags(first[created_id], case.role), "tagged on create, so findable"
    assert case.role not in owner.status().resources

    owner.store.heal()
    with call_scope() as calls:
        observed = ENGINE.ensure(case.cls(aws), case.role, desired, owner.scope())

    assert observed.id == created_id, "the retry must adopt the resource found by its tags"
    assert live(aws).keys() == {created_id}, "no second resource"
    assert owner.status().resources[case.role].id == created_id
    assert calls.by_operation().get(f"ec2:{case.create_operation}", 0) == 0, calls.by_operation()


def test_class1_never_deletes_what_it_could_not_record(
    case: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = case.prepare(build)
    owner.store.fail_status_writes(records(case.role))
    delete = faults.fail(aws, case.delete_operation)

    with pytest.raises(RetryableError) as failure:
        ENGINE.ensure(case.cls(aws), case.role, desired, owner.scope())

    assert type(failure.value) is RetryableError, "no rollback, so no RollbackFailed"
    assert delete.seen == 0, "class 1 can find its resource by tags: no rollback delete"
    assert len(live(aws)) == 1


def test_class1_crash_after_create_is_adopted_by_tags_after_restart(
    case: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = case.prepare(build)
    crash = faults.crash_after(aws, case.create_operation)

    with pytest.raises(SimulatedCrash):
        Engine(MOTO).ensure(case.cls(aws), case.role, desired, owner.scope())
    assert crash.fired == 1
    assert case.role not in owner.status().resources, "the process died before recording"
    faults.clear()

    restarted = Engine(MOTO)
    observed = restarted.ensure(case.cls(aws), case.role, desired, owner.scope())

    found = live(aws)
    assert list(found) == [observed.id], f"the restart must adopt, not create again: {found}"
    assert owner.status().resources[case.role].id == observed.id
    assert crash.seen == 1, f"{case.create_operation} was sent once"
