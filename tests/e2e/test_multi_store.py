"""Several stores in one AWS account, through the real CLI: each store keeps to what it created.

Two state files (two management "clusters") apply to one moto endpoint. The audit of one never classes the
other's resources as orphans nor deletes them; a cluster name one store already uses in the account is a
clear failure from the other, with nothing created, adopted or touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.accounting import is_mutating
from capa_py.engine.tags import CAPA_PY_ROLE_TAG, ROLE_TAG, STORE_TAG
from capa_py.store.sqlite import SQLiteStore
from tests.audit.helpers import cluster_manifest
from tests.e2e.e2e_support import ROOT, Capa, MotoInspector

pytestmark = pytest.mark.slow

AMI = "ami-785db401"  # one of moto's built-in images, as in the example manifest
OWNED = "sigs.k8s.io/cluster-api-provider-aws/cluster/"


def _store(tmp_path: Path, name: str, endpoint: str) -> Capa:
    home = tmp_path / name
    home.mkdir()
    # The checkout under test, whatever the environment has installed.
    return Capa(home / f"{name}.db", endpoint, env_extra={"PYTHONPATH": str(ROOT)})


def _manifest(tmp_path: Path, cluster: str, cidr: str) -> Path:
    path = tmp_path / f"{cluster}.yaml"
    path.write_text(cluster_manifest(cluster, cidr, AMI))
    return path


def _uid(capa: Capa) -> str:
    with SQLiteStore(capa.state) as store:
        return store.uid


def _tagged(inspector: MotoInspector, cluster: str) -> dict[str, dict[str, str]]:
    """id → tags of every EC2 and ELBv2 resource carrying ``cluster``'s owned tag."""
    tags: dict[str, dict[str, str]] = {}
    for page in inspector.ec2.get_paginator("describe_tags").paginate():
        for tag in page["Tags"]:
            tags.setdefault(tag["ResourceId"], {})[tag["Key"]] = tag.get("Value", "")
    elbv2 = inspector.elbv2
    lbs = [lb["LoadBalancerArn"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]]
    arns = [*lbs, *(tg["TargetGroupArn"] for tg in elbv2.describe_target_groups()["TargetGroups"])]
    for lb in lbs:
        arns += [
            listener["ListenerArn"] for listener in elbv2.describe_listeners(LoadBalancerArn=lb)["Listeners"]
        ]
    tags.update(inspector._elb_tags(arns))
    return {i: t for i, t in tags.items() if t.get(OWNED + cluster) == "owned"}


def _mutating(document: dict[str, Any]) -> dict[str, int]:
    calls = document["awsCalls"]["byOperation"]
    return {op: n for op, n in calls.items() if is_mutating(op.split(":", 1)[1])}


def test_one_stores_audit_never_classes_or_deletes_another_stores_cluster(
    tmp_path: Path, endpoint: str, inspector: MotoInspector
) -> None:
    a, b = _store(tmp_path, "a", endpoint), _store(tmp_path, "b", endpoint)
    a.ok("apply", "-f", str(_manifest(tmp_path, "alpha", "10.1")), "--timeout", "2m")
    b.ok("apply", "-f", str(_manifest(tmp_path, "beta", "10.2")), "--timeout", "2m")
    beta_before = _tagged(inspector, "beta")
    assert beta_before, "beta made nothing"
    assert {tags.get(STORE_TAG) for tags in beta_before.values()} == {_uid(b)}, "every beta resource names b"
    assert _uid(a) != _uid(b)

    run = a.ok("audit", "--delete", "--yes", "-o", "json", "--aws-endpoint", endpoint)
    document = run.json()

    beta_rows = [row for row in document["rows"] if row["cluster"] == "beta" or row["id"] in beta_before]
    assert not beta_rows, f"a's audit must not list b's cluster at all: {beta_rows}"
    deleted = {r["id"] for r in document.get("deletion", {}).get("results", [])}
    assert not deleted & set(beta_before), f"a's audit deleted b's resources: {deleted & set(beta_before)}"
    assert _tagged(inspector, "beta").keys() == beta_before.keys(), "every beta resource must still exist"

    again = b.ok("apply", "-f", str(tmp_path / "beta.yaml"), "--timeout", "2m", "-o", "json").json()
    assert set(again["states"].values()) == {"ready"}, again["states"]
    assert not _mutating(again), f"b's objects must reconcile unchanged: {_mutating(again)}"
    assert again["awsCalls"]["mutating"] == 0


def test_a_cluster_name_another_store_uses_fails_naming_it_and_touches_nothing(
    tmp_path: Path, endpoint: str, inspector: MotoInspector
) -> None:
    a, b = _store(tmp_path, "a", endpoint), _store(tmp_path, "b", endpoint)
    manifest = _manifest(tmp_path, "gamma", "10.3")
    a.ok("apply", "-f", str(manifest), "--timeout", "2m")
    totals = inspector.inventory(tag_key=OWNED + "gamma").counts("total")
    tags_before = _tagged(inspector, "gamma")

    run = b.run("apply", "-f", str(manifest), "--timeout", "2m", "-o", "json")

    assert run.returncode == 1, f"a name another store owns must fail:\n{run}"
    assert _uid(a) in run.stdout + run.stderr, f"the failure must name the other store:\n{run}"
    assert "ClusterOwnedElsewhere" in run.stdout + run.stderr, str(run)
    assert inspector.inventory(tag_key=OWNED + "gamma").counts("total") == totals, "nothing created"
    assert _tagged(inspector, "gamma") == tags_before, "nothing of the first store's cluster re-tagged"
    for obj in b.get("awsclusters") + b.get("awsmachines"):
        assert not obj.get("status", {}).get("resources"), f"the second store adopted something: {obj}"
    # The first store still owns and reconciles its cluster without a change.
    again = a.ok("apply", "-f", str(manifest), "--timeout", "2m", "-o", "json").json()
    assert not _mutating(again), _mutating(again)


def test_a_created_cluster_carries_capa_role_values_and_capa_py_roles(
    tmp_path: Path, endpoint: str, inspector: MotoInspector
) -> None:
    a = _store(tmp_path, "a", endpoint)
    a.ok("apply", "-f", str(_manifest(tmp_path, "delta", "10.4")), "--timeout", "2m")
    uid = _uid(a)
    by_role: dict[str, dict[str, str]] = {}
    for tags in _tagged(inspector, "delta").values():
        assert tags.get(STORE_TAG) == uid, tags
        by_role[tags[CAPA_PY_ROLE_TAG]] = tags
    expected = {
        "vpc": "common",
        "internet-gateway": "common",
        "subnet-public-us-east-1a": "public",
        "subnet-private-us-east-1a": "private",
        "route-table-public": "public",
        "route-table-private-us-east-1a": "private",
        "eip-nat-us-east-1a": "common",
        "nat-gateway-us-east-1a": "common",
        "sg-controlplane": "controlplane",
        "sg-node": "node",
        "sg-lb": "lb",
        "apiserver-lb": "apiserver",
        "apiserver-tg": "apiserver",
        "apiserver-listener": "apiserver",
        "instance-delta-cp-0": "control-plane",
    }
    got = {role: by_role[role].get(ROLE_TAG) for role in expected if role in by_role}
    assert got == expected, f"CAPA role values by capa-py role: {got}"


def test_deleting_a_cluster_sweeps_only_this_stores_stray_resources(
    tmp_path: Path, endpoint: str, inspector: MotoInspector
) -> None:
    a = _store(tmp_path, "a", endpoint)
    manifest = _manifest(tmp_path, "eta", "10.6")
    a.ok("apply", "-f", str(manifest), "--timeout", "2m")

    def address(tags: dict[str, str]) -> str:
        spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        return str(inspector.ec2.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])

    owned = {OWNED + "eta": "owned"}
    ours = address({**owned, STORE_TAG: _uid(a)})  # a duplicate from a lost record: swept
    theirs = address({**owned, STORE_TAG: "another-store-uid"})
    storeless = address(owned)

    a.ok("delete", "-f", str(manifest), "--wait", "--timeout", "2m")

    left = {x["AllocationId"] for x in inspector.ec2.describe_addresses()["Addresses"]}
    assert ours not in left, "this store's stray resource is swept with its cluster"
    assert theirs in left, "another store's resource must never be swept"
    assert storeless in left, "a resource no capa-py store tagged must never be swept"
