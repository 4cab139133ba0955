"""Every resource class against moto over HTTP: the contract the engine relies on.

Each case builds a desired state (and its prerequisites) for one class; the tests then pin, per class:
create (with tags where the create takes them), describe by id (and None for an id that does not exist),
describe by tags (owned + role tags only; other clusters, other roles and extra user tags make no
difference), describe by natural key, tagging after create, an update that is idempotent, and delete
(gone afterwards; deleting a missing id raises NotFound, or is a no-op where AWS documents that).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from capa_py.aws.errors import NotFound
from capa_py.engine.profiles import profile_for_endpoint
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tokens import client_token
from capa_py.engine.traits import Traits
from resources import RESOURCE_CLASSES
from resources.autoscaling_group import AutoScalingGroup
from resources.bucket import Bucket, BucketDesired
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.hosted_zone import HostedZone, HostedZoneDesired
from resources.instance import Instance
from resources.internet_gateway import (
    InternetGateway,
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
    InternetGatewayDesired,
)
from resources.launch_template import LaunchTemplate, LaunchTemplateVersion
from resources.listener import Listener, ListenerDesired
from resources.load_balancer import LoadBalancer, LoadBalancerDesired
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.parameter import Parameter, ParameterDesired
from resources.record_set import RecordSet, RecordSetDesired
from resources.route import Route, RouteDesired
from resources.route_table import (
    RouteTable,
    RouteTableAssociation,
    RouteTableAssociationDesired,
    RouteTableDesired,
)
from resources.secret import Secret, SecretDesired
from resources.security_group import IngressRule, SecurityGroup, SecurityGroupDesired
from resources.subnet import Subnet, SubnetDesired
from resources.target_group import (
    TargetGroup,
    TargetGroupDesired,
    TargetRegistration,
    TargetRegistrationDesired,
)
from resources.vpc import Vpc, VpcDesired
from tests.resources.builders import REGION, ZONE, Builder

RUN = uuid.uuid4().hex[:12]
"""Part of the name of a bucket no test makes."""

ELB_ARN = "arn:aws:elasticloadbalancing:us-east-1:123456789012"


def attached_gateway(b: Builder, vpc_id: str) -> str:
    gateway_id = b.internet_gateway().id
    InternetGatewayAttachment(b.aws).create(InternetGatewayAttachmentDesired(gateway_id, vpc_id), None, None)
    return gateway_id


def route_desired(b: Builder) -> RouteDesired:
    vpc_id = b.vpc().id
    return RouteDesired(b.route_table(vpc_id).id, "0.0.0.0/0", attached_gateway(b, vpc_id))


def association_desired(b: Builder) -> RouteTableAssociationDesired:
    vpc_id = b.vpc().id
    return RouteTableAssociationDesired(b.route_table(vpc_id).id, b.subnet(vpc_id).id)


def security_group_desired(b: Builder) -> SecurityGroupDesired:
    rules = (IngressRule("tcp", 6443, 6443, cidr_block="0.0.0.0/0", description="API server"),)
    return SecurityGroupDesired(b.vpc().id, "alpha-apiserver-lb", "Kubernetes API server", rules)


def listener_desired(b: Builder) -> ListenerDesired:
    subnet = b.subnet()
    lb = b.load_balancer(subnet.id)
    return ListenerDesired(lb.id, b.target_group(subnet.attributes["vpc_id"]).id)


def registration_desired(b: Builder) -> TargetRegistrationDesired:
    subnet = b.subnet()
    target_group = b.target_group(subnet.attributes["vpc_id"])
    return TargetRegistrationDesired(target_group.id, b.instance(subnet.id).id)


def registration_bogus_id(b: Builder) -> str:
    return f"{b.target_group(b.vpc().id).id}|i-0123456789abcdef0"


def hosted_zone_desired(b: Builder) -> HostedZoneDesired:
    return HostedZoneDesired(f"{b.unique('alpha')}.capa.internal", b.vpc().id, REGION)


def record_set_desired(b: Builder) -> RecordSetDesired:
    zone = HostedZone(b.aws).create(hosted_zone_desired(b), None, None)
    return RecordSetDesired(zone.id, f"api.{zone.attributes['name']}", ("alpha-lb.elb.example.com",))


@dataclass(frozen=True)
class Case:
    cls: type[ResourceClass[Any]]
    desired: Callable[[Builder], Any]
    bogus_id: str | Callable[[Builder], str]
    delete_missing_raises: bool = True
    """Whether deleting an id that does not exist raises NotFound (else it is a no-op)."""

    def missing_id(self, b: Builder) -> str:
        return self.bogus_id if isinstance(self.bogus_id, str) else self.bogus_id(b)


CASES = [
    Case(Vpc, lambda b: VpcDesired("10.1.0.0/16"), "vpc-0123456789abcdef0"),
    Case(
        Subnet,
        lambda b: SubnetDesired(b.vpc().id, "10.0.2.0/24", ZONE, is_public=True),
        "subnet-0123456789abcdef0",
    ),
    Case(InternetGateway, lambda b: InternetGatewayDesired(), "igw-0123456789abcdef0"),
    Case(
        InternetGatewayAttachment,
        lambda b: InternetGatewayAttachmentDesired(b.internet_gateway().id, b.vpc().id),
        "igw-0123456789abcdef0:vpc-0123456789abcdef0",
    ),
    Case(ElasticIp, lambda b: ElasticIpDesired(), "eipalloc-0123456789abcdef0"),
    Case(
        NatGateway,
        lambda b: NatGatewayDesired(b.subnet(public=True).id, b.elastic_ip().id),
        "nat-0123456789abcdef0",
    ),
    Case(RouteTable, lambda b: RouteTableDesired(b.vpc().id), "rtb-0123456789abcdef0"),
    Case(Route, route_desired, "rtb-0123456789abcdef0|0.0.0.0/0"),
    Case(RouteTableAssociation, association_desired, "rtbassoc-0123456789abcdef0"),
    Case(SecurityGroup, security_group_desired, "sg-0123456789abcdef0"),
    Case(
        LoadBalancer,
        lambda b: LoadBalancerDesired(b.unique("alpha-apiserver"), (b.subnet().id,)),
        f"{ELB_ARN}:loadbalancer/net/missing/0123456789abcdef",
        delete_missing_raises=False,
    ),
    Case(
        TargetGroup,
        lambda b: TargetGroupDesired(b.unique("alpha-apiserver"), b.vpc().id),
        f"{ELB_ARN}:targetgroup/missing/0123456789abcdef",
    ),
    Case(Listener, listener_desired, f"{ELB_ARN}:listener/net/missing/0123456789abcdef/0123456789abcdef"),
    Case(TargetRegistration, registration_desired, registration_bogus_id),
    Case(Instance, lambda b: b.instance_desired(b.subnet().id), "i-0123456789abcdef0"),
    Case(
        Secret,
        lambda b: SecretDesired(f"aws.cluster.x-k8s.io/{b.unique('machine')}-0", b"\x1f\x8b bootstrap"),
        "aws.cluster.x-k8s.io/missing-0",
        delete_missing_raises=False,  # a delete without recovery of a missing name succeeds
    ),
    Case(
        Parameter,
        lambda b: ParameterDesired(f"/cluster.x-k8s.io/{b.unique('machine')}/0", "H4sIAAAAAAAA/bootstrap"),
        "/cluster.x-k8s.io/missing/0",
    ),
    Case(HostedZone, hosted_zone_desired, "Z0123456789ABCDEFGHIJ"),
    Case(RecordSet, record_set_desired, "Z0123456789ABCDEFGHIJ|api.missing.internal.|CNAME"),
    # Bucket names are global across accounts (LocalStack's too): a name no other test has.
    Case(Bucket, lambda b: BucketDesired(f"capa-py-contract-{uuid.uuid4().hex}"), f"capa-py-missing-{RUN}"),
    Case(LaunchTemplate, lambda b: b.launch_template_desired(), "lt-0123456789abcdef0"),
    Case(
        LaunchTemplateVersion,
        lambda b: b.launch_template_version_desired(),
        lambda b: f"{b.launch_template().id}:7",
    ),
    Case(AutoScalingGroup, lambda b: b.autoscaling_group_desired(), "alpha-pool-missing"),
]


def _ids(cases: list[Case]) -> list[str]:
    return [case.cls.kind for case in cases]


_NO_DELETE_VERSIONS = (
    "moto gap: moto 5.2 has no DeleteLaunchTemplateVersions (HTTP 500); capa-py never deletes a version "
    "on its own, deleting the template deletes them all"
)
MOTO_GAPS: dict[tuple[str, str], str] = {
    ("test_tag_after_create", "launch-template"): (
        "moto gap: moto 5.2 reports only the tags a launch template was created with, not those CreateTags "
        "added later"
    ),
    ("test_delete_makes_it_gone", "launch-template-version"): _NO_DELETE_VERSIONS,
    ("test_delete_of_missing_id", "launch-template-version"): _NO_DELETE_VERSIONS,
}
"""Contract tests that fail for a gap of moto's: strict xfail, so a moto that closes the gap fails them."""


def _params(test: str, cases: list[Case]) -> list[Any]:
    return [
        pytest.param(
            case,
            id=case.cls.kind,
            marks=[pytest.mark.xfail(reason=MOTO_GAPS[(test, case.cls.kind)], strict=True)]
            if (test, case.cls.kind) in MOTO_GAPS
            else [],
        )
        for case in cases
    ]


TAGGABLE = [c for c in CASES if c.cls.traits.taggable]
TAG_ON_CREATE = [c for c in CASES if c.cls.traits.tag_on_create]
KEYED = [c for c in CASES if c.cls.traits.natural_key]


def test_every_resource_class_has_a_contract_case() -> None:
    assert {c.cls for c in CASES} == set(RESOURCE_CLASSES)


def _effective(case: Case, b: Builder) -> Traits:
    """The traits the engine uses on the test's endpoint (moto and LocalStack drop a bucket's create tags)."""
    return profile_for_endpoint(b.aws.endpoint).effective(case.cls.kind, case.cls.traits)


def _create(case: Case, b: Builder, role: str = "contract", cluster: str = "alpha", **user_tags: str) -> Any:
    """Create as the engine would on this endpoint: tags at create where the endpoint applies them, else
    right after (for a class that tags on create on AWS)."""
    resource = case.cls(b.aws)
    desired = case.desired(b)
    tags = b.tags(role, cluster, **user_tags) if case.cls.traits.tag_on_create else None
    # A token as the engine derives it (Secrets Manager wants 32 to 64 characters).
    token = client_token("contract", b.unique("token")) if case.cls.traits.client_token else None
    at_create = _effective(case, b).tag_on_create
    created = resource.create(desired, tags if at_create else None, token)
    if tags and not at_create:
        resource.tag(created.id, tags)
    return resource, desired, created


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_create_then_describe_by_id(case: Case, build: Builder) -> None:
    resource, _, created = _create(case, build, team="blue")
    found = resource.describe_by_id(created.id)
    assert found is not None, f"{case.cls.kind} {created.id} not found right after create"
    assert found.id == created.id
    if case.cls.traits.tag_on_create:
        expected = build.tags("contract", team="blue")
        assert expected.items() <= found.tags.items(), f"tags applied at create: {found.tags}"


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_describe_by_id_of_missing_id_is_none(case: Case, build: Builder) -> None:
    assert case.cls(build.aws).describe_by_id(case.missing_id(build)) is None


@pytest.mark.parametrize("case", TAG_ON_CREATE, ids=_ids(TAG_ON_CREATE))
def test_describe_by_tags_finds_by_owned_and_role_tags_only(case: Case, build: Builder, lookup: Any) -> None:
    resource, desired, mine = _create(case, build, role="control-plane", team="blue", cost_center="42")
    _create(case, build, role="control-plane", cluster="beta")  # another cluster, same role
    _create(case, build, role="node")  # same cluster, another role

    found = resource.describe_by_tags(lookup("control-plane"), desired)
    assert [o.id for o in found] == [mine.id]
    assert found[0].tags["team"] == "blue", "user tags are reported, though never used to look up"
    assert resource.describe_by_tags(lookup("control-plane", cluster="gamma"), desired) == []


@pytest.mark.parametrize("case", _params("test_tag_after_create", TAGGABLE))
def test_tag_after_create(case: Case, build: Builder, lookup: Any) -> None:
    resource = case.cls(build.aws)
    desired = case.desired(build)
    created = resource.create(desired, None, None)
    assert resource.describe_by_tags(lookup("late"), desired) == []

    resource.tag(created.id, build.tags("late"))

    found = resource.describe_by_id(created.id)
    assert found is not None
    assert build.tags("late").items() <= found.tags.items()
    assert [o.id for o in resource.describe_by_tags(lookup("late"), desired)] == [created.id]


@pytest.mark.parametrize("case", KEYED, ids=_ids(KEYED))
def test_describe_by_key(case: Case, build: Builder) -> None:
    resource = case.cls(build.aws)
    desired = case.desired(build)
    assert resource.describe_by_key(desired) is None, "nothing holds the key before create"

    tags = build.tags("keyed") if _effective(case, build).tag_on_create else None
    created = resource.create(desired, tags, None)

    found = resource.describe_by_key(desired)
    assert found is not None
    assert found.id == created.id
    assert resource.key_of(desired), "a readable key for logs and intents"


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_update_is_idempotent(case: Case, build: Builder) -> None:
    resource, desired, created = _create(case, build)
    first = resource.describe_by_id(created.id)
    assert first is not None
    resource.update(first, desired)

    second = resource.describe_by_id(first.id)
    assert second is not None
    assert resource.update(second, desired) is False, "a second update with nothing to change changes nothing"


@pytest.mark.parametrize("case", _params("test_delete_makes_it_gone", CASES))
def test_delete_makes_it_gone(case: Case, build: Builder) -> None:
    resource, _, created = _create(case, build)

    resource.delete(created.id)

    assert resource.describe_by_id(created.id) is None


@pytest.mark.parametrize("case", _params("test_delete_of_missing_id", CASES))
def test_delete_of_missing_id(case: Case, build: Builder) -> None:
    """The engine treats NotFound from delete as "already gone"; where AWS itself succeeds, so do we."""
    resource = case.cls(build.aws)
    missing = case.missing_id(build)
    if case.delete_missing_raises:
        with pytest.raises(NotFound):
            resource.delete(missing)
    else:
        resource.delete(missing)
