"""The traits each resource class declares are facts of the real AWS API, checked against botocore's models.

An operation's input shape has a ``TagSpecifications`` (EC2) or ``Tags`` (ELBv2) member when the create can
tag, and a member with the ``idempotencyToken`` trait when it takes a client token. If AWS changes an API,
or a class claims what its API lacks, the strategy the engine picks would rest on a false premise.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import Any

import botocore.session
import pytest

from capa_py.engine.resource import ResourceClass
from capa_py.engine.traits import StrategyClass
from resources import RESOURCE_CLASSES, resource_class

_SESSION = botocore.session.get_session()


def _input_members(cls: type[ResourceClass[Any]]) -> dict[str, Any]:
    model = _SESSION.get_service_model(cls.service).operation_model(cls.create_operation)
    assert model.input_shape is not None
    return dict(model.input_shape.members)


NESTED_TAGS = {("s3", "CreateBucket"): "CreateBucketConfiguration"}
"""Creates whose tags sit one level down, in a configuration structure."""

DOCUMENTED_TOKENS = {("route53", "CreateHostedZone"): "CallerReference"}
"""Idempotency tokens the API reference documents but botocore's model does not mark with the
``idempotencyToken`` trait: Route 53's CallerReference "allows failed CreateHostedZone requests to be
retried without the risk of executing the operation twice"."""


def _takes_tags(members: dict[str, Any]) -> bool:
    return "TagSpecifications" in members or "Tags" in members


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_tag_on_create_matches_the_api(cls: type[ResourceClass[Any]]) -> None:
    members = _input_members(cls)
    takes_tags = _takes_tags(members)
    nested = NESTED_TAGS.get((cls.service, cls.create_operation))
    if nested is not None:
        takes_tags = takes_tags or _takes_tags(dict(members[nested].members))
    assert cls.traits.tag_on_create == takes_tags, (
        f"{cls.__name__}: {cls.service}:{cls.create_operation} "
        f"{'takes' if takes_tags else 'does not take'} tags at create"
    )


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_client_token_matches_the_api(cls: type[ResourceClass[Any]]) -> None:
    members = _input_members(cls)
    tokens = [name for name, shape in members.items() if shape.metadata.get("idempotencyToken")]
    documented = DOCUMENTED_TOKENS.get((cls.service, cls.create_operation))
    if documented is not None:
        model = _SESSION.get_service_model(cls.service).operation_model(cls.create_operation)
        assert model.input_shape is not None
        assert documented in model.input_shape.required_members, f"{documented} is a required member"
        tokens.append(documented)
    assert cls.traits.client_token == bool(tokens), (
        f"{cls.__name__}: {cls.service}:{cls.create_operation} idempotency token members: {tokens or 'none'}"
    )


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_declared_traits_come_with_their_calls(cls: type[ResourceClass[Any]]) -> None:
    """A class that says it is taggable or keyed implements the call that makes that true."""
    if cls.traits.taggable or cls.traits.tag_on_create:
        assert cls.tag is not ResourceClass.tag, f"{cls.__name__} is taggable but has no tag()"
        assert cls.describe_by_tags is not ResourceClass.describe_by_tags
    if cls.traits.natural_key:
        assert cls.describe_by_key is not ResourceClass.describe_by_key, (
            f"{cls.__name__} has no describe_by_key"
        )


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_traits_declaration_cites_the_create_operation(cls: type[ResourceClass[Any]]) -> None:
    """Each ``traits = Traits(...)`` is followed by a docstring naming the API call it was read from."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for statement, following in itertools.pairwise(body):
        targets = getattr(statement, "targets", [])
        if any(getattr(t, "id", None) == "traits" for t in targets):
            assert isinstance(following, ast.Expr), f"{cls.__name__}.traits has no docstring"
            assert isinstance(following.value, ast.Constant)
            assert cls.create_operation in following.value.value
            return
    pytest.fail(f"{cls.__name__} does not assign traits in its body")


EXPECTED_STRATEGIES = {
    "vpc": StrategyClass.TAG_ON_CREATE,
    "subnet": StrategyClass.TAG_ON_CREATE,
    "internet-gateway": StrategyClass.TAG_ON_CREATE,
    "internet-gateway-attachment": StrategyClass.NO_TAGS_NO_TOKEN,
    "elastic-ip": StrategyClass.TAG_ON_CREATE,
    "nat-gateway": StrategyClass.TAG_ON_CREATE,
    "route-table": StrategyClass.TAG_ON_CREATE,
    "route": StrategyClass.NO_TAGS_NO_TOKEN,
    "route-table-association": StrategyClass.NO_TAGS_NO_TOKEN,
    "security-group": StrategyClass.TAG_ON_CREATE,
    "load-balancer": StrategyClass.TAG_ON_CREATE,
    "target-group": StrategyClass.TAG_ON_CREATE,
    "listener": StrategyClass.TAG_ON_CREATE,
    "target-registration": StrategyClass.NO_TAGS_NO_TOKEN,
    "instance": StrategyClass.TAG_ON_CREATE,
    "secret": StrategyClass.TAG_ON_CREATE,
    "parameter": StrategyClass.TAG_ON_CREATE,
    "hosted-zone": StrategyClass.TOKEN_SEPARATE_TAGGING,
    "record-set": StrategyClass.NO_TAGS_NO_TOKEN,
    "bucket": StrategyClass.TAG_ON_CREATE,
    "launch-template": StrategyClass.TAG_ON_CREATE,
    "launch-template-version": StrategyClass.TOKEN_NO_TAGS,
    "autoscaling-group": StrategyClass.TAG_ON_CREATE,
}


def test_strategy_classes_match_aws_traits_table() -> None:
    assert {cls.kind: cls.traits.strategy for cls in RESOURCE_CLASSES} == EXPECTED_STRATEGIES


def test_untracked_classes_all_have_natural_keys() -> None:
    """Strategy 5 (no tags, no token) is only safe because each such resource can be found by its key."""
    untracked = [cls for cls in RESOURCE_CLASSES if cls.traits.strategy is StrategyClass.NO_TAGS_NO_TOKEN]
    assert untracked
    assert all(cls.traits.natural_key for cls in untracked)


def test_resource_class_lookup_by_kind() -> None:
    assert len({cls.kind for cls in RESOURCE_CLASSES}) == len(RESOURCE_CLASSES), "kinds are unique"
    for cls in RESOURCE_CLASSES:
        assert resource_class(cls.kind) is cls
    with pytest.raises(KeyError, match="unknown resource kind 'queue'"):
        resource_class("queue")


def test_only_nat_gateways_and_autoscaling_groups_delete_slowly() -> None:
    """An Auto Scaling group goes only once AWS has terminated its instances."""
    slow = [cls.kind for cls in RESOURCE_CLASSES if cls.deletion_is_slow]
    assert slow == ["nat-gateway", "autoscaling-group"]


def test_emulator_profiles_tag_buckets_and_zones_after_create() -> None:
    """moto and LocalStack drop CreateBucketConfiguration.Tags and ignore CallerReference: there, a bucket
    is tagged after its create (class 3) and a hosted zone takes class 3 too; on AWS, classes 1 and 2."""
    from capa_py.engine.profiles import AWS, LOCALSTACK, MOTO

    for kind, on_aws in (("bucket", 1), ("hosted-zone", 2), ("record-set", 5)):
        cls = resource_class(kind)
        assert AWS.effective(kind, cls.traits).strategy == on_aws, kind
        for profile in (MOTO, LOCALSTACK):
            expected = on_aws if kind == "record-set" else 3
            assert profile.effective(kind, cls.traits).strategy == expected, (profile.name, kind)
