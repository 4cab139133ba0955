"""The audit's scope is this store: other stores' resources, and resources no capa-py store tagged, are
``foreign`` — listed for this store's clusters (or a cluster named with ``--cluster``), never leaks, and
deleted only with ``--cluster NAME --include-foreign``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner

from capa_app.cli.main import app
from capa_py.engine.tags import NAME_TAG, ROLE_TAG, STORE_TAG
from capa_py.store.sqlite import SQLiteStore
from tests.audit.helpers import ZONE, clean_aws_env, cluster_manifest, make_pool, owned, tag_spec
from tests.harness.moto_server import MotoServer

OTHER_STORE = "6f1d2c3b-0000-4e5f-8a9b-112233445566"


class Cli:
    """``capa --state … ARGS --aws-endpoint URL``, in-process."""

    def __init__(self, state: Any, url: str) -> None:
        self.state = state
        self.url = url
        self.runner = CliRunner()

    def __call__(self, *args: str) -> Any:
        try:
            return self.runner.invoke(app, ["--state", str(self.state), *args, "--aws-endpoint", self.url])
        finally:
            structlog.reset_defaults()
            logging.basicConfig(force=True)

    @property
    def store_uid(self) -> str:
        with SQLiteStore(self.state) as store:
            return store.uid


@pytest.fixture(scope="module")
def applied(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Any]]:
    """Cluster ``demo`` applied by this store; yields the CLI and a raw EC2 client."""
    scratch = tmp_path_factory.mktemp("audit-foreign")
    moto_server.reset()
    manifest = scratch / "demo.yaml"
    manifest.write_text(cluster_manifest("demo", "10.5"))
    with clean_aws_env(scratch):
        cli = Cli(scratch / "state.db", moto_server.url)
        result = cli("apply", "-f", str(manifest))
        assert result.exit_code == 0, result.output
        yield cli, make_pool(moto_server, scratch).for_region("us-east-1").ec2.raw


def _volume(ec2: Any, tags: dict[str, str]) -> str:
    return str(
        ec2.create_volume(AvailabilityZone=ZONE, Size=8, TagSpecifications=tag_spec("volume", tags))[
            "VolumeId"
        ]
    )


def _volumes(ec2: Any) -> set[str]:
    return {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}


def _audit(cli: Cli, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("audit", "-o", "json", *args)
    assert result.exit_code in (0, 3), result.output
    return result.exit_code, json.loads(result.stdout)


def _row(document: dict[str, Any], resource_id: str) -> dict[str, Any] | None:
    return next((r for r in document["rows"] if r["id"] == resource_id), None)


def test_resources_of_a_managed_cluster_name_from_elsewhere_are_foreign_and_never_deleted(
    applied: tuple[Cli, Any],
) -> None:
    cli, ec2 = applied
    other = _volume(ec2, {**owned("demo", None), STORE_TAG: OTHER_STORE})
    storeless = _volume(ec2, owned("demo", None))
    try:
        code, document = _audit(cli, "--delete", "--yes")

        assert code == 0, "foreign resources are not leaks"
        other_row, storeless_row = _row(document, other), _row(document, storeless)
        assert other_row is not None
        assert storeless_row is not None
        assert other_row["class"] == "foreign (other store)"
        assert other_row["store"] == OTHER_STORE
        assert OTHER_STORE in other_row["reason"]
        assert storeless_row["class"] == "foreign (no capa-py store)"
        assert document["leaks"] == 0
        assert document["storeUid"] == cli.store_uid
        assert {other, storeless} <= _volumes(ec2), "foreign resources must never be deleted by default"
    finally:
        for volume in (other, storeless):
            if volume in _volumes(ec2):
                ec2.delete_volume(VolumeId=volume)


def test_another_stores_cluster_is_out_of_the_default_scope_and_deleted_only_when_named(
    applied: tuple[Cli, Any],
) -> None:
    cli, ec2 = applied
    theirs = _volume(ec2, {**owned("epsilon", None), STORE_TAG: OTHER_STORE})
    try:
        _, document = _audit(cli, "--delete", "--yes")
        assert _row(document, theirs) is None, "another store's cluster is not this store's business"
        assert theirs in _volumes(ec2)

        _, named = _audit(cli, "--cluster", "epsilon", "--delete", "--yes")
        row = _row(named, theirs)
        assert row is not None
        assert row["class"] == "foreign (other store)"
        assert theirs in _volumes(ec2), "named but without --include-foreign: listed, not deleted"

        code, deleted = _audit(cli, "--cluster", "epsilon", "--include-foreign", "--delete", "--yes")
        assert code == 0, deleted
        assert theirs not in _volumes(ec2), "named with --include-foreign: deleted"
    finally:
        if theirs in _volumes(ec2):
            ec2.delete_volume(VolumeId=theirs)


def test_include_foreign_without_a_cluster_is_bad_input(applied: tuple[Cli, Any]) -> None:
    cli, _ = applied
    result = cli("audit", "--include-foreign", "--delete", "--yes")
    assert result.exit_code == 2, result.output
    assert "--cluster" in result.output


def test_this_stores_orphans_of_a_gone_cluster_are_still_orphans(applied: tuple[Cli, Any]) -> None:
    """ "Cluster gone" means gone from this store, for what carries this store's tag."""
    cli, ec2 = applied
    ours = _volume(ec2, {**owned("zeta", cli.store_uid), NAME_TAG: "zeta-data"})
    try:
        code, document = _audit(cli)
        row = _row(document, ours)
        assert row is not None
        assert row["class"] == "orphan (cluster gone)"
        assert code == 3
        code, _ = _audit(cli, "--delete", "--yes")
        assert code == 0
        assert ours not in _volumes(ec2)
    finally:
        if ours in _volumes(ec2):
            ec2.delete_volume(VolumeId=ours)


def test_the_role_of_an_old_style_resource_is_read_from_capas_role_tag(applied: tuple[Cli, Any]) -> None:
    """Made before ``capa-py.io/role`` existed: capa-py's role in CAPA's key is still the row's role."""
    cli, ec2 = applied
    ours = _volume(ec2, {**owned("demo", cli.store_uid), ROLE_TAG: "volume-data"})
    try:
        _, document = _audit(cli)
        row = _row(document, ours)
        assert row is not None
        assert row["class"] == "orphan (unrecorded)"
        assert "carries role volume-data" in row["reason"]
    finally:
        ec2.delete_volume(VolumeId=ours)
