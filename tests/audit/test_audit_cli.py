"""``capa audit`` as a user runs it: apply a cluster, leak something, audit (exit 3), delete (exit 0).

The commands run in-process through the real ``capa`` app against a moto server URL, with no ambient AWS
configuration.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner

from capa_app.cli import audit_cmd
from capa_app.cli.main import app
from capa_py.store.sqlite import SQLiteStore
from tests.audit.helpers import REGION, ZONE, clean_aws_env, cluster_manifest, make_pool, owned, tag_spec
from tests.harness.moto_server import MotoServer


class Capa:
    """``capa --state … ARGS --aws-endpoint URL``, in-process."""

    def __init__(self, state: Path, url: str) -> None:
        self.state = state
        self.url = url
        self.runner = CliRunner()

    def __call__(self, *args: str, endpoint: bool = True, stdin: str | None = None) -> Any:
        argv = ["--state", str(self.state), *args]
        if endpoint:
            argv += ["--aws-endpoint", self.url]
        try:
            return self.runner.invoke(app, argv, input=stdin)
        finally:
            # The command configured logging onto the runner's stderr, closed now: later tests must not
            # log there.
            structlog.reset_defaults()
            logging.basicConfig(force=True)


@pytest.fixture(scope="module")
def applied(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Capa, Any]]:
    """A one-zone cluster ``demo`` applied with ``capa apply``; yields the CLI and a raw EC2 client."""
    scratch = tmp_path_factory.mktemp("audit-cli")
    moto_server.reset()
    manifest = scratch / "demo.yaml"
    manifest.write_text(cluster_manifest("demo", "10.3"))
    with clean_aws_env(scratch):
        capa = Capa(scratch / "state.db", moto_server.url)
        result = capa("apply", "-f", str(manifest))
        assert result.exit_code == 0, result.output
        ec2 = make_pool(moto_server, scratch).for_region(REGION).ec2.raw
        yield capa, ec2


def _store_uid(capa: Capa) -> str:
    with SQLiteStore(capa.state) as store:
        return store.uid


def _leak_address(ec2: Any, store_uid: str) -> str:
    tags = tag_spec("elastic-ip", owned("demo", store_uid))
    return str(ec2.allocate_address(Domain="vpc", TagSpecifications=tags)["AllocationId"])


def _addresses(ec2: Any) -> set[str]:
    return {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}


def test_a_healthy_cluster_audits_clean(applied: tuple[Capa, Any]) -> None:
    capa, _ = applied
    result = capa("audit")
    assert result.exit_code == 0, result.output
    assert "No leaks found." in result.stdout
    assert "managed" in result.stdout


def test_a_leak_made_by_hand_exits_3_and_is_listed_with_its_class(applied: tuple[Capa, Any]) -> None:
    capa, ec2 = applied
    leak = _leak_address(ec2, _store_uid(capa))
    try:
        for discovery in ("tagging-api", "describe"):
            result = capa("audit", "--discovery", discovery)
            assert result.exit_code == 3, result.output
            line = next(line for line in result.stdout.splitlines() if leak in line)
            assert "elastic-ip" in line
            assert "demo" in line
            assert "orphan (unrecorded)" in line
        document = json.loads(capa("audit", "-o", "json").stdout)
        assert document["leaks"] == 1
        (row,) = [r for r in document["rows"] if r["id"] == leak]
        assert row["class"] == "orphan (unrecorded)"
        assert row["cluster"] == "demo"
        assert row["reason"]
        assert document["awsCalls"]["total"] > 0
    finally:
        ec2.release_address(AllocationId=leak)


def test_delete_without_yes_is_a_dry_run(applied: tuple[Capa, Any]) -> None:
    capa, ec2 = applied
    leak = _leak_address(ec2, _store_uid(capa))
    try:
        result = capa("audit", "--delete")
        assert result.exit_code == 3, result.output
        assert "Dry run: nothing was deleted" in result.stdout
        assert "Deletion plan (1 resource," in result.stdout
        assert leak in _addresses(ec2)
        document = json.loads(capa("audit", "--delete", "-o", "json").stdout)
        assert document["dryRun"] is True
        assert [s["row"]["id"] for s in document["plan"]["steps"]] == [leak]
    finally:
        ec2.release_address(AllocationId=leak)


def test_delete_asks_on_a_terminal_and_deletes_only_when_told_yes(
    applied: tuple[Capa, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    capa, ec2 = applied
    leak = _leak_address(ec2, _store_uid(capa))
    monkeypatch.setattr(audit_cmd, "_interactive", lambda: True)
    declined = capa("audit", "--delete", stdin="no\n")
    assert declined.exit_code == 3, declined.output
    assert leak in _addresses(ec2)
    confirmed = capa("audit", "--delete", stdin="yes\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert leak not in _addresses(ec2)


def test_delete_yes_removes_the_leak_and_exits_0(applied: tuple[Capa, Any]) -> None:
    capa, ec2 = applied
    leak = _leak_address(ec2, _store_uid(capa))
    result = capa("audit", "--delete", "--yes")
    assert result.exit_code == 0, result.output
    assert f"elastic-ip   {leak}" in result.stdout
    assert "1 removed, 0 failed, 0 left alone." in result.stdout
    assert leak not in _addresses(ec2)
    assert capa("audit").exit_code == 0


def test_older_than_hides_leaks_known_to_be_younger(applied: tuple[Capa, Any]) -> None:
    capa, ec2 = applied
    volume = ec2.create_volume(
        AvailabilityZone=ZONE, Size=8, TagSpecifications=tag_spec("volume", owned("demo", _store_uid(capa)))
    )
    try:
        assert capa("audit").exit_code == 3
        assert capa("audit", "--older-than", "7d").exit_code == 0
        assert capa("audit", "--older-than", "1s", "--cluster", "demo").exit_code in (0, 3)
    finally:
        ec2.delete_volume(VolumeId=volume["VolumeId"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "demo", "--all-clusters"], "--cluster"),
        (["--discovery", "guess"], "tagging-api or describe"),
        (["--older-than", "soon"], "not a duration"),
        (["--region", "mars-north-1"], "unknown AWS region"),
        (["-o", "yaml"], "table or json"),
    ],
)
def test_bad_input_exits_2_before_any_aws_call(
    applied: tuple[Capa, Any], args: list[str], message: str
) -> None:
    capa, _ = applied
    result = capa("audit", *args, endpoint=False)
    assert result.exit_code == 2, result.output
    assert message in result.output
