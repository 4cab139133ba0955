"""Store identity: every store has a uid, every resource the engine creates names it, and a resource of the
cluster's name that another store (or no capa-py store) made is never adopted nor deleted.

Also the role tags: CAPA's role values in CAPA's key, capa-py's role in ``capa-py.io/role``, and resources
made before that tag existed (capa-py's role in CAPA's key) still found and re-tagged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from capa_py.api.aws import RecordedResource
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import ClusterOwnedElsewhere
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import (
    CAPA_PY_ROLE_TAG,
    NAME_TAG,
    ROLE_TAG,
    STORE_TAG,
    cluster_tag_key,
    managed_tags,
)
from capa_py.engine.traits import choose_strategy
from capa_py.store import SQLiteStore
from resources.target_group import TargetGroup, TargetGroupDesired
from resources.vpc import Vpc, VpcDesired
from tests.engine.support import FlakyStatusStore, Owner, vpcs
from tests.resources.builders import Builder

ENGINE = Engine(MOTO)
OTHER_STORE = "0b7c4bd2-5f0e-4d4e-9a43-2f1d1e7c9a11"


@pytest.fixture
def other_owner(tmp_path: Path) -> Owner:
    """The same cluster name, ``alpha``, in a second store (another management cluster)."""
    return Owner.create(FlakyStatusStore(SQLiteStore(tmp_path / "other.db")))


def _old_style_tags(cluster: str, role: str) -> dict[str, str]:
    """What a capa-py version without store tags and ``capa-py.io/role`` put on a resource."""
    return {NAME_TAG: f"{cluster}-{role}", cluster_tag_key(cluster): "owned", ROLE_TAG: role}


# -- the uid -----------------------------------------------------------------------------------------------


def test_store_uid_is_created_once_and_stable_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SQLiteStore(path) as first, SQLiteStore(path) as concurrent:
        uid = first.uid
        assert concurrent.uid == uid, "two handles on one file are one store"
    with SQLiteStore(path) as reopened:
        assert reopened.uid == uid, "the uid must survive closing and reopening"
    with SQLiteStore(tmp_path / "other.db") as other:
        assert other.uid != uid, "another file is another store"
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT name, value FROM store_meta WHERE name = 'uid'").fetchall()
    assert rows == [("uid", uid)], "persisted once, in the store's own file"


# -- the store tag and the role tags on create --------------------------------------------------------------


def test_created_resources_carry_the_store_tag_capa_role_and_capa_py_role(
    aws: AWSClients, owner: Owner
) -> None:
    observed = ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.30.0.0/16"), owner.scope())

    tags = vpcs(aws)[observed.id]
    assert tags[STORE_TAG] == owner.store.uid
    assert tags[CAPA_PY_ROLE_TAG] == "vpc"
    assert tags[ROLE_TAG] == "common", "CAPA's value for a VPC"
    assert tags[cluster_tag_key("alpha")] == "owned"


# -- never another store's --------------------------------------------------------------------------------


def test_another_stores_resource_of_the_same_cluster_name_is_refused_not_adopted(
    aws: AWSClients, owner: Owner, other_owner: Owner
) -> None:
    theirs = ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.31.0.0/16"), other_owner.scope())
    tags_before = vpcs(aws)[theirs.id]

    with pytest.raises(ClusterOwnedElsewhere) as raised:
        ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.31.0.0/16"), owner.scope())

    message = str(raised.value)
    assert f"cluster alpha's vpc {theirs.id}" in message
    assert other_owner.store.uid in message, "the message must name the other store"
    assert raised.value.reason == "ClusterOwnedElsewhere"
    assert vpcs(aws) == {theirs.id: tags_before}, "nothing created, nothing re-tagged"
    assert "vpc" not in owner.status().resources, "nothing adopted"


def test_a_store_less_resource_with_the_owned_tag_is_refused(aws: AWSClients, owner: Owner) -> None:
    """Made by CAPA, by hand, or by a capa-py version without store tags (found through the old role tag)."""
    users = Vpc(aws).create(VpcDesired("10.32.0.0/16"), _old_style_tags("alpha", "vpc"), None)

    with pytest.raises(ClusterOwnedElsewhere, match="not a capa-py store"):
        ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.32.0.0/16"), owner.scope())

    assert vpcs(aws).keys() == {users.id}
    assert STORE_TAG not in vpcs(aws)[users.id]


def test_a_natural_key_held_by_another_stores_resource_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    vpc_id = build.vpc("10.33.0.0/16").id
    desired = TargetGroupDesired("alpha-apiserver-tg", vpc_id)
    theirs_tags = {cluster_tag_key("alpha"): "owned", STORE_TAG: OTHER_STORE}
    theirs = TargetGroup(aws).create(desired, theirs_tags, None)

    with pytest.raises(ClusterOwnedElsewhere, match=OTHER_STORE):
        ENGINE.ensure(TargetGroup(aws), "apiserver-tg", desired, owner.scope())

    groups = aws.elbv2.raw.describe_target_groups()["TargetGroups"]
    assert [g["TargetGroupArn"] for g in groups] == [theirs.id]
    assert "apiserver-tg" not in owner.status().resources


def test_remove_never_deletes_another_stores_resource(
    aws: AWSClients, owner: Owner, other_owner: Owner
) -> None:
    desired = VpcDesired("10.34.0.0/16")
    theirs = ENGINE.ensure(Vpc(aws), "vpc", desired, other_owner.scope())

    ENGINE.remove(Vpc(aws), "vpc", owner.scope(), desired)

    assert theirs.id in vpcs(aws), "the other store's VPC must survive this store's delete"


def test_remove_never_deletes_a_store_less_resource_but_deletes_a_recorded_one(
    aws: AWSClients, owner: Owner
) -> None:
    stray = Vpc(aws).create(VpcDesired("10.35.0.0/16"), _old_style_tags("alpha", "vpc"), None)
    ENGINE.remove(Vpc(aws), "vpc", owner.scope(), VpcDesired("10.35.0.0/16"))
    assert stray.id in vpcs(aws), "unrecorded and store-less: not this store's to delete"

    _record(owner, "vpc", stray.id, aws)
    ENGINE.remove(Vpc(aws), "vpc", owner.scope(), VpcDesired("10.35.0.0/16"))
    assert stray.id not in vpcs(aws), "recorded in this store's status: ours"


# -- migration from old-style role tags -------------------------------------------------------------------


def _record(owner: Owner, role: str, resource_id: str, aws: AWSClients) -> None:
    strategy = choose_strategy(ENGINE.traits(Vpc(aws))).label
    owner.scope().recorder.record(role, RecordedResource(kind="vpc", id=resource_id, strategy=strategy))


def test_a_recorded_old_style_resource_is_re_tagged_by_the_update_flow(aws: AWSClients, owner: Owner) -> None:
    old = Vpc(aws).create(VpcDesired("10.36.0.0/16"), _old_style_tags("alpha", "vpc"), None)
    _record(owner, "vpc", old.id, aws)

    observed = ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.36.0.0/16"), owner.scope())

    assert observed.id == old.id
    tags = vpcs(aws)[old.id]
    assert managed_tags("alpha", "vpc", store_uid=owner.store.uid).items() <= tags.items(), tags
    assert tags[ROLE_TAG] == "common"
    assert tags[CAPA_PY_ROLE_TAG] == "vpc"
    assert vpcs(aws).keys() == {old.id}


def test_an_unrecorded_old_style_resource_of_this_store_is_found_by_the_old_role_tag(
    aws: AWSClients, owner: Owner
) -> None:
    """A resource tagged with this store but capa-py's role still in CAPA's key (re-tagging interrupted)."""
    tags = {**_old_style_tags("alpha", "vpc"), STORE_TAG: owner.store.uid}
    old = Vpc(aws).create(VpcDesired("10.37.0.0/16"), tags, None)

    observed = ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.37.0.0/16"), owner.scope())
    assert observed.id == old.id, "adopted by the old role tag, not duplicated"
    assert owner.status().resources["vpc"].id == old.id
    ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.37.0.0/16"), owner.scope())  # the update flow

    after = vpcs(aws)[old.id]
    assert after[CAPA_PY_ROLE_TAG] == "vpc", after
    assert after[ROLE_TAG] == "common", after
    assert vpcs(aws).keys() == {old.id}


def test_a_shared_old_style_resource_gets_only_the_identity_tags(aws: AWSClients, owner: Owner) -> None:
    """Handed off to the cloud provider (create/delete only), yet migrated: store tag, capa-py's role, and
    CAPA's role value in place of capa-py's old role — nothing else."""
    old = Vpc(aws).create(VpcDesired("10.38.0.0/16"), _old_style_tags("alpha", "vpc"), None)
    _record(owner, "vpc", old.id, aws)

    ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.38.0.0/16"), owner.scope(), shared_with_cloud_provider=True)

    tags = vpcs(aws)[old.id]
    assert tags[STORE_TAG] == owner.store.uid
    assert tags[CAPA_PY_ROLE_TAG] == "vpc"
    assert tags[ROLE_TAG] == "common"
    assert "kubernetes.io/cluster/alpha" not in tags, "a handed-off resource gets nothing else"
