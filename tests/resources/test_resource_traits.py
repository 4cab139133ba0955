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


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_tag_on_create_matches_the_api(cls: type[ResourceClass[Any]]) -> None:
    members = _input_members(cls)
    takes_tags = "TagSpecifications" in members or "Tags" in members
    assert cls.traits.tag_on_create == takes_tags, (
        f"{cls.__name__}: {cls.service}:{cls.create_operation} "
        f"{'takes' if takes_tags else 'does not take'} tags at create"
    )


@pytest.mark.parametrize("cls", RESOURCE_CLASSES, ids=lambda c: c.kind)
def test_client_token_matches_the_api(cls: type[ResourceClass[Any]]) -> None:
    tokens = [name for name, shape in _input_members(cls).items() if shape.metadata.get("idempotencyToken")]
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
    with pytest.raises(KeyError, match="unknown resource kind 'bucket'"):
        resource_class("bucket")


def test_only_nat_gateways_and_autoscaling_groups_delete_slowly() -> None:
    """An Auto Scaling group goes only once AWS has terminated its instances."""
    slow = [cls.kind for cls in RESOURCE_CLASSES if cls.deletion_is_slow]
    assert slow == ["nat-gateway", "autoscaling-group"]
