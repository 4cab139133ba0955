"""Traits a resource class declares, and the strategy class they select.

The traits are facts about the AWS create API, not behaviour:

``tag_on_create``  the create call takes tags and applies them atomically (``TagSpecifications``/``Tags``)
``client_token``   the create call takes an idempotency token (``ClientToken``)
``natural_key``    the resource has a user-chosen unique key it can be found by (a name, a route destination)
``taggable``       tags can be added after creation

The five strategy classes are those of the design "AWS Resource Handling":

1. tag on create (with or without a token): find by tags, create if absent, record;
2. token, separate tagging: create with token, record, tag;
3. separate tagging, no token: find by tags, create, record and tag; roll back when both fail;
4. no tags, token: create with token, record;
5. no tags, no token: create, record; roll back when recording fails.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import IntEnum
from typing import Any


class StrategyClass(IntEnum):
    TAG_ON_CREATE = 1
    TOKEN_SEPARATE_TAGGING = 2
    SEPARATE_TAGGING_NO_TOKEN = 3
    TOKEN_NO_TAGS = 4
    NO_TAGS_NO_TOKEN = 5

    @property
    def label(self) -> str:
        return {
            1: "tag-on-create",
            2: "token+separate-tagging",
            3: "separate-tagging",
            4: "token-only",
            5: "untracked",
        }[int(self)]


@dataclass(frozen=True)
class Traits:
    tag_on_create: bool = False
    client_token: bool = False
    natural_key: bool = False
    taggable: bool = False

    def with_overrides(self, **overrides: Any) -> Traits:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown trait(s) {sorted(unknown)}; traits are {sorted(known)}")
        return replace(self, **overrides)

    @property
    def strategy(self) -> StrategyClass:
        return choose_strategy(self)

    def describe(self) -> str:
        on = [f.name for f in fields(self) if getattr(self, f.name)]
        return ", ".join(on) or "none"


def choose_strategy(traits: Traits) -> StrategyClass:
    """The strategy class for a set of effective traits."""
    if traits.tag_on_create:
        return StrategyClass.TAG_ON_CREATE
    if traits.taggable:
        return (
            StrategyClass.TOKEN_SEPARATE_TAGGING
            if traits.client_token
            else StrategyClass.SEPARATE_TAGGING_NO_TOKEN
        )
    return StrategyClass.TOKEN_NO_TAGS if traits.client_token else StrategyClass.NO_TAGS_NO_TOKEN
