"""Strategy classes 2, 3 and 5 on shipped resources whose traits come from botocore's models, with the four
edge cases — a crash after the create before the record, a throttled create, a second process racing the
first, a failed tag write — injected through botocore events against moto in server mode.

* class 2: a Route 53 private hosted zone as declared (``CallerReference`` token, tagged after), against the
  token-honouring moto (``tests/harness/moto_tokens.py``): moto 5.2 ignores ``CallerReference`` and would
  make a second zone for a repeat, while Route 53 refuses the repeat with ``HostedZoneAlreadyExists``, which
  the harness restores and the resource class answers with the zone the reference made;
* class 3: an S3 bucket (on AWS tagged by its create; moto drops ``CreateBucketConfiguration.Tags``, so the
  ``moto`` profile tags it after, found again by its name) and the hosted zone under the ``moto`` profile
  (no token honoured, no key: found again through the intent);
* class 5: a Route 53 record set (``UPSERT``; found again by zone, name and type).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import AWSError
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError, RollbackFailed
from capa_py.engine.profiles import MOTO
from capa_py.engine.resource import ResourceClass, tag_dict
from capa_py.engine.traits import StrategyClass
from resources.bucket import Bucket, BucketDesired
from resources.hosted_zone import HostedZone, HostedZoneDesired, zone_id
from resources.record_set import RecordSet, RecordSetDesired
from tests.engine.support import Faults, Owner, SimulatedCrash, carries_lookup_tags, records
from tests.resources.builders import REGION, Builder

ZONE_NAME = "alpha.capa.internal"
LB_NAME = "alpha-apiserver-0123456789.elb.us-east-1.amazonaws.com"

Live = Callable[[AWSClients], dict[str, dict[str, str]]]


def hosted_zones(aws: AWSClients) -> dict[str, dict[str, str]]:
    route53 = aws.client("route53")
    ids = [zone_id(z["Id"]) for z in route53.call("ListHostedZones")["HostedZones"]]
    return {
        i: tag_dict(
            route53.call("ListTagsForResource", ResourceType="hostedzone", ResourceId=i)[
                "ResourceTagSet"
            ].get("Tags")
        )
        for i in ids
    }


def buckets(aws: AWSClients) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for name in Bucket(aws).names():
        observed = Bucket(aws).describe_by_id(name)
        found[name] = observed.tags if observed is not None else {}
    return found


def cname_records(zone: str) -> Live:
    def live(aws: AWSClients) -> dict[str, dict[str, str]]:
        listed = aws.client("route53").call("ListResourceRecordSets", HostedZoneId=zone)["ResourceRecordSets"]
        return {f"{zone}|{r['Name']}|{r['Type']}": {} for r in listed if r["Type"] == "CNAME"}

    return live


def _zone_desired(build: Builder) -> tuple[Any, Live]:
    return HostedZoneDesired(ZONE_NAME, build.vpc().id, REGION), hosted_zones


def _bucket_desired(build: Builder) -> tuple[Any, Live]:
    return BucketDesired("alpha-capa-py-bootstrap"), buckets


def _record_desired(build: Builder) -> tuple[Any, Live]:
    zone = HostedZone(build.aws).create(HostedZoneDesired(ZONE_NAME, build.vpc().id, REGION), None, None)
    return RecordSetDesired(zone.id, f"api.{ZONE_NAME}", (LB_NAME,)), cname_records(zone.id)


@dataclass(frozen=True)
class Shipped:
    """A shipped resource class under the profile that gives it the strategy class under test."""

    name: str
    cls: type[ResourceClass[Any]]
    role: str
    strategy: StrategyClass
    prepare: Callable[[Builder], tuple[Any, Live]]
    tag_operation: str | None
    tokens: bool = False
    """Against the token-honouring moto, with the declared token trait kept."""

    @property
    def service(self) -> str:
        return self.cls.service

    @property
    def create_operation(self) -> str:
        return self.cls.create_operation

    def engine(self) -> Engine:
        if self.tokens:
            return Engine(MOTO.with_overrides({self.cls.kind: {"client_token": True}}, name="moto+tokens"))
        return Engine(MOTO)

    def __str__(self) -> str:
        return self.name


ZONE_CLASS2 = Shipped(
    "hosted-zone-class2",
    HostedZone,
    "apiserver-dns-zone",
    StrategyClass.TOKEN_SEPARATE_TAGGING,
    _zone_desired,
    "ChangeTagsForResource",
    tokens=True,
)
ZONE_CLASS3 = Shipped(
    "hosted-zone-class3",
    HostedZone,
    "apiserver-dns-zone",
    StrategyClass.SEPARATE_TAGGING_NO_TOKEN,
    _zone_desired,
    "ChangeTagsForResource",
)
BUCKET_CLASS3 = Shipped(
    "bucket-class3",
    Bucket,
    "bucket",
    StrategyClass.SEPARATE_TAGGING_NO_TOKEN,
    _bucket_desired,
    "PutBucketTagging",
)
RECORD_CLASS5 = Shipped(
    "record-set-class5",
    RecordSet,
    "apiserver-dns-record",
    StrategyClass.NO_TAGS_NO_TOKEN,
    _record_desired,
    None,
)
SHIPPED = [ZONE_CLASS2, ZONE_CLASS3, BUCKET_CLASS3, RECORD_CLASS5]
TAGGED = [s for s in SHIPPED if s.tag_operation is not None]


@pytest.fixture
def clients(request: pytest.FixtureRequest, subject: Shipped) -> AWSClients:
    return request.getfixturevalue("aws_tokens" if subject.tokens else "aws")  # type: ignore[no-any-return]


@pytest.fixture
def built(clients: AWSClients) -> Builder:
    return Builder(clients)


def _ensure(subject: Shipped, aws: AWSClients, desired: Any, owner: Owner) -> Any:
    return subject.engine().ensure(subject.cls(aws), subject.role, desired, owner.scope())


def _assert_one_recorded_and_tagged(
    subject: Shipped, aws: AWSClients, live: Live, owner: Owner, rid: str
) -> None:
    found = live(aws)
    assert found.keys() == {rid}, f"exactly one {subject.cls.kind}: {found}"
    recorded = owner.status().resources[subject.role]
    assert (recorded.id, recorded.tags_complete, recorded.strategy) == (rid, True, subject.strategy.label)
    if subject.tag_operation is not None:
        assert carries_lookup_tags(found[rid], subject.role), f"tagged for its role: {found[rid]}"


@pytest.mark.parametrize("subject", SHIPPED, ids=str)
def test_the_profile_gives_the_strategy_class(subject: Shipped, clients: AWSClients) -> None:
    assert subject.engine().strategy(subject.cls(clients)) is subject.strategy


@pytest.mark.parametrize("subject", SHIPPED, ids=str)
def test_crash_after_the_create_before_the_record_leaves_one_resource_after_restart(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(built)
    creates = faults.watch(clients, subject.create_operation, service=subject.service)
    faults.crash_after(clients, subject.create_operation, service=subject.service)

    with pytest.raises(SimulatedCrash):
        _ensure(subject, clients, desired, owner)
    (made,) = live(clients)
    assert subject.role not in owner.status().resources, "the crash came before the record"

    observed = _ensure(subject, clients, desired, owner)

    assert observed.id == made, "the restarted reconcile takes the resource the interrupted create made"
    _assert_one_recorded_and_tagged(subject, clients, live, owner, made)
    if subject.tokens:
        references = {p["CallerReference"] for p in creates.params}
        assert len(creates.params) == 2, "the restart repeats the create with its token"
        assert len(references) == 1, "with the same caller reference, refused by Route 53 as already used"
    else:
        assert len(creates.params) == 1, "found again by its key or its intent, never created twice"


@pytest.mark.parametrize("subject", SHIPPED, ids=str)
def test_a_throttled_create_is_retried_and_makes_one_resource(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(built)
    throttled = faults.fail(
        clients, subject.create_operation, code="Throttling", status=400, times=1, service=subject.service
    )

    with call_scope() as calls:
        observed = _ensure(subject, clients, desired, owner)

    assert (throttled.fired, throttled.seen) == (1, 2), "refused once, then sent again"
    assert calls.by_operation()[f"{subject.service}:{subject.create_operation}"] == 2
    _assert_one_recorded_and_tagged(subject, clients, live, owner, observed.id)


@pytest.mark.parametrize("subject", SHIPPED, ids=str)
def test_a_create_whose_answer_is_lost_makes_one_resource(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    """A 5xx after AWS did the work: repeated at once where a repeat is safe (a token, an UPSERT), else left
    to the next reconcile, which finds what the create made by its key or its intent."""
    desired, live = subject.prepare(built)
    creates = faults.watch(clients, subject.create_operation, service=subject.service)
    lost = faults.lose_response(clients, subject.create_operation, service=subject.service)
    repeatable = subject.tokens or subject.cls is RecordSet

    if repeatable:
        observed = _ensure(subject, clients, desired, owner)
        assert len(creates.params) == 2, "repeated by the client at once"
    else:
        with pytest.raises(AWSError, match="InternalError"):
            _ensure(subject, clients, desired, owner)
        assert len(creates.params) == 1, "a create without a token is never repeated after an unknown outcome"
        observed = _ensure(subject, clients, desired, owner)
        assert len(creates.params) == 1, "the next reconcile found it: no second create"
    assert lost.fired == 1

    _assert_one_recorded_and_tagged(subject, clients, live, owner, observed.id)


@pytest.mark.parametrize("subject", SHIPPED, ids=str)
def test_a_second_process_racing_the_first_converges_on_one_resource(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    """Process B reconciles the same object between A's create and A's record (two controllers after a
    lost lease, or ``capa apply`` beside ``capa controller``)."""
    desired, live = subject.prepare(built)
    seen_by_b: list[str] = []

    def process_b() -> None:
        seen_by_b.append(_ensure(subject, clients, desired, owner).id)

    race = faults.interleave(clients, subject.create_operation, process_b, service=subject.service)

    observed = _ensure(subject, clients, desired, owner)

    assert race.fired == 1
    assert seen_by_b == [observed.id], "both processes hold the same resource"
    _assert_one_recorded_and_tagged(subject, clients, live, owner, observed.id)


@pytest.mark.parametrize("subject", TAGGED, ids=str)
def test_a_failed_tag_write_is_recorded_incomplete_and_tagged_by_the_next_reconcile(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    assert subject.tag_operation is not None
    desired, live = subject.prepare(built)
    faults.fail(clients, subject.tag_operation, service=subject.service)

    with pytest.raises(RetryableError, match="tagging failed"):
        _ensure(subject, clients, desired, owner)

    (made,) = live(clients)
    assert not carries_lookup_tags(live(clients)[made], subject.role)
    recorded = owner.status().resources[subject.role]
    assert (recorded.id, recorded.tags_complete) == (made, False), "recorded, marked as missing its tags"

    faults.clear()
    with call_scope() as calls:
        observed = _ensure(subject, clients, desired, owner)

    assert observed.id == made
    assert calls.by_operation().get(f"{subject.service}:{subject.create_operation}", 0) == 0
    assert calls.by_operation()[f"{subject.service}:{subject.tag_operation}"] >= 1
    _assert_one_recorded_and_tagged(subject, clients, live, owner, made)


@pytest.mark.parametrize("subject", [ZONE_CLASS3, BUCKET_CLASS3], ids=str)
def test_class3_rolls_back_when_neither_record_nor_tag_can_be_written(
    subject: Shipped, clients: AWSClients, built: Builder, owner: Owner, faults: Faults
) -> None:
    assert subject.tag_operation is not None
    desired, live = subject.prepare(built)
    faults.fail(clients, subject.tag_operation, service=subject.service)
    owner.store.fail_status_writes(records(subject.role))

    with pytest.raises(RetryableError):
        _ensure(subject, clients, desired, owner)

    assert live(clients) == {}, "neither recorded nor tagged: deleted, nothing left to find it by"


def test_class2_zone_is_never_deleted_when_its_record_fails(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = _zone_desired(build_tokens)
    owner.store.fail_status_writes(records(ZONE_CLASS2.role))
    deletes = faults.watch(aws_tokens, "DeleteHostedZone", service="route53")

    with pytest.raises(RetryableError, match="recording failed"):
        _ensure(ZONE_CLASS2, aws_tokens, desired, owner)
    assert deletes.seen == 0, "the caller reference makes a retry safe: no rollback"
    (made,) = live(aws_tokens)

    owner.store.heal()
    observed = _ensure(ZONE_CLASS2, aws_tokens, desired, owner)

    assert observed.id == made
    _assert_one_recorded_and_tagged(ZONE_CLASS2, aws_tokens, live, owner, made)


def test_class5_record_set_is_deleted_when_its_record_fails_and_stops_when_that_fails_too(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = _record_desired(build)
    owner.store.fail_status_writes(records(RECORD_CLASS5.role))

    with pytest.raises(RetryableError):
        _ensure(RECORD_CLASS5, aws, desired, owner)
    assert live(aws) == {}, "unrecorded: rolled back"

    # The UPSERT goes through; the DELETE of the rollback is refused.
    def refuse_delete(params: dict[str, Any], **_: Any) -> None:
        changes = params.get("ChangeBatch", {}).get("Changes", [])
        if changes and changes[0]["Action"] == "DELETE":
            raise AWSError("refused by the test", "route53", "ChangeResourceRecordSets", "AccessDenied")

    events = aws.client("route53").raw.meta.events
    events.register("provide-client-params.route53.ChangeResourceRecordSets", refuse_delete)
    try:
        with pytest.raises(RollbackFailed):
            _ensure(RECORD_CLASS5, aws, desired, owner)
    finally:
        events.unregister("provide-client-params.route53.ChangeResourceRecordSets", refuse_delete)
    assert len(live(aws)) == 1, "the record the rollback could not delete is left, reported loudly"
