"""Which strategy class a set of traits selects, and how endpoint profiles lower declared traits per kind.

The table below is written out, not computed: it is the design's classification ("AWS Resource
Handling"), and ``choose_strategy`` must agree with it for every one of the 16 trait combinations. A natural
key never changes the class; it only adds a lookup before the create.
"""

from __future__ import annotations

import itertools

import pytest

from capa_py.engine.engine import Engine
from capa_py.engine.profiles import AWS, LOCALSTACK, MOTO, EndpointProfile
from capa_py.engine.traits import StrategyClass, Traits, choose_strategy
from resources import RESOURCE_CLASSES
from tests.engine.support import CLASS_OVERRIDES, engine_for

# tag_on_create, client_token, natural_key, taggable → class
TABLE: list[tuple[bool, bool, bool, bool, int]] = [
    (False, False, False, False, 5),
    (False, False, False, True, 3),
    (False, False, True, False, 5),
    (False, False, True, True, 3),
    (False, True, False, False, 4),
    (False, True, False, True, 2),
    (False, True, True, False, 4),
    (False, True, True, True, 2),
    (True, False, False, False, 1),
    (True, False, False, True, 1),
    (True, False, True, False, 1),
    (True, False, True, True, 1),
    (True, True, False, False, 1),
    (True, True, False, True, 1),
    (True, True, True, False, 1),
    (True, True, True, True, 1),
]


def test_table_covers_all_sixteen_trait_combinations() -> None:
    combinations = {row[:4] for row in TABLE}
    assert combinations == set(itertools.product([False, True], repeat=4))


@pytest.mark.parametrize(
    ("tag_on_create", "client_token", "natural_key", "taggable", "expected"),
    TABLE,
    ids=[f"toc={r[0]:d}-tok={r[1]:d}-key={r[2]:d}-tag={r[3]:d}" for r in TABLE],
)
def test_choose_strategy_follows_the_design_table(
    tag_on_create: bool, client_token: bool, natural_key: bool, taggable: bool, expected: int
) -> None:
    traits = Traits(tag_on_create, client_token, natural_key, taggable)

    assert choose_strategy(traits) == StrategyClass(expected), traits.describe()
    assert traits.strategy == StrategyClass(expected)


def test_strategy_labels_are_what_status_records() -> None:
    assert [s.label for s in StrategyClass] == [
        "tag-on-create",
        "token+separate-tagging",
        "separate-tagging",
        "token-only",
        "untracked",
    ]


def test_kind_overrides_win_over_the_wildcard() -> None:
    declared = Traits(tag_on_create=True, client_token=True, taggable=True)
    profile = MOTO.with_overrides({"nat-gateway": {"client_token": True, "tag_on_create": False}})

    assert not profile.effective("route-table", declared).client_token, "'*' lowers tokens for others"
    assert profile.effective("nat-gateway", declared) == Traits(client_token=True, taggable=True)
    assert profile.overrides["*"] == {"client_token": False}, "merging keeps the base profile's overrides"
    assert MOTO.overrides == {"*": {"client_token": False}, "bucket": {"tag_on_create": False}}, (
        "with_overrides must not change the base"
    )


def test_unknown_trait_override_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown trait"):
        EndpointProfile("typo", {"vpc": {"tag_on_creation": False}}).effective("vpc", Traits())


@pytest.mark.parametrize("strategy", sorted(CLASS_OVERRIDES))
def test_overrides_put_every_resource_class_in_the_wanted_strategy(strategy: int) -> None:
    for cls in RESOURCE_CLASSES:
        engine = engine_for(strategy, cls.kind)
        traits = engine.profile.effective(cls.kind, cls.traits)
        assert choose_strategy(traits) == StrategyClass(strategy), f"{cls.kind}: {traits.describe()}"
        assert traits.natural_key == cls.traits.natural_key, "overrides never invent or drop a natural key"


def test_emulator_profiles_never_rely_on_client_tokens() -> None:
    for profile in (MOTO, LOCALSTACK):
        for cls in RESOURCE_CLASSES:
            traits = profile.effective(cls.kind, cls.traits)
            assert not traits.client_token, f"{profile.name}/{cls.kind} would rely on an ignored token"
            assert choose_strategy(traits) not in (
                StrategyClass.TOKEN_SEPARATE_TAGGING,
                StrategyClass.TOKEN_NO_TAGS,
            )


def test_aws_profile_keeps_the_declared_strategy() -> None:
    engine = Engine(AWS)
    for cls in RESOURCE_CLASSES:
        assert engine.profile.effective(cls.kind, cls.traits) == cls.traits, cls.kind
