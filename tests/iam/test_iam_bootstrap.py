"""``capa iam bootstrap`` and ``capa iam delete`` against moto over HTTP: made by name, converging on a
re-run with no mutating call, never adopting another's resource, rotating policy versions at AWS's limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capa_app.iam import bootstrap
from capa_app.iam.bootstrap import (
    MADE_BY,
    MADE_BY_TAG,
    ForeignIAMResource,
    apply_steps,
    observe,
    plan_bootstrap,
    plan_delete,
)
from capa_app.iam.policy import ROLE_SUFFIX, policy_document
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.tags import STORE_TAG
from tests.e2e.e2e_support import Capa
from tests.harness.moto_server import MotoServer
from tests.iam.iam_support import iam_inventory

STORE = "store-a"
NAMES = [f"{p}{ROLE_SUFFIX}" for p in ("control-plane", "controllers", "nodes")]
OURS = {STORE_TAG: STORE, MADE_BY_TAG: MADE_BY}
MUTATING_CALLS = 16
"""What a bootstrap on a fresh account changes, and a delete of it: one call per resource and link."""


def _bootstrap(aws: AWSClients, store: str = STORE) -> list[str]:
    steps = plan_bootstrap(aws, observe(aws), store)
    apply_steps(aws, steps)
    return [s.operation for s in steps]


def expected_inventory(store: str = STORE) -> dict[str, Any]:
    """IAM after a bootstrap by ``store``: its roles, instance profiles and policies, each linked once."""
    cp, ctl, nodes = NAMES
    ours = {STORE_TAG: store, MADE_BY_TAG: MADE_BY}
    return {
        "roles": {
            cp: {"tags": ours, "policies": [cp, nodes]},
            ctl: {"tags": ours, "policies": [ctl]},
            nodes: {"tags": ours, "policies": [nodes]},
        },
        "profiles": {name: {"tags": ours, "roles": [name]} for name in NAMES},
        "policies": {name: {"tags": ours, "versions": ["v1"], "default": "v1"} for name in NAMES},
    }


def test_bootstrap_on_a_fresh_account_makes_capas_roles_profiles_and_policies(aws: AWSClients) -> None:
    with call_scope() as calls:
        _bootstrap(aws)
    assert iam_inventory(aws) == expected_inventory()
    # Measured: 10 reads (who am I, then a Get per name) and 16 changes, one call each.
    assert calls.mutating_operations() == {
        "iam:AddRoleToInstanceProfile": 3,
        "iam:AttachRolePolicy": 4,
        "iam:CreateInstanceProfile": 3,
        "iam:CreatePolicy": 3,
        "iam:CreateRole": 3,
    }
    assert calls.total(mutating=False) == 10
    assert calls.total(mutating=True) == MUTATING_CALLS


def test_a_rerun_finds_everything_by_name_and_makes_no_mutating_call(aws: AWSClients) -> None:
    _bootstrap(aws)
    with call_scope() as calls:
        assert _bootstrap(aws) == []
    assert calls.total(mutating=True) == 0
    assert (
        calls.total() == 16
    )  # sts, then GetPolicy+GetPolicyVersion, GetRole+ListAttached, GetInstanceProfile
    assert iam_inventory(aws) == expected_inventory()


def test_the_policy_documents_are_the_ones_capa_iam_policy_prints(aws: AWSClients) -> None:
    _bootstrap(aws)
    iam = aws.client("iam").raw
    for name, kind in bootstrap.POLICIES.items():
        arn = f"arn:aws:iam::123456789012:policy/{name}"
        document = iam.get_policy_version(PolicyArn=arn, VersionId="v1")["PolicyVersion"]["Document"]
        assert (json.loads(document) if isinstance(document, str) else document) == policy_document(kind)


@pytest.mark.parametrize(
    ("kind", "tags", "who"),
    [
        ("role", {STORE_TAG: "store-b"}, "capa-py store store-b"),
        ("profile", {}, "no capa-py store"),
        ("policy", {"team": "infra"}, "no capa-py store"),
    ],
)
def test_a_same_named_resource_this_store_did_not_make_is_never_adopted(
    aws: AWSClients, kind: str, tags: dict[str, str], who: str
) -> None:
    iam = aws.client("iam").raw
    name = NAMES[2]
    tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
    if kind == "role":
        iam.create_role(
            RoleName=name, AssumeRolePolicyDocument=json.dumps(bootstrap.TRUST_POLICY), Tags=tag_list
        )
    elif kind == "profile":
        iam.create_instance_profile(InstanceProfileName=name, Tags=tag_list)
    else:
        iam.create_policy(PolicyName=name, PolicyDocument=json.dumps(policy_document("nodes")), Tags=tag_list)
    before = iam_inventory(aws)
    with pytest.raises(ForeignIAMResource, match=f"{name} exists and was made by {who}"):
        _bootstrap(aws)
    assert iam_inventory(aws) == before, "a refused bootstrap changed IAM"


def test_a_changed_policy_document_becomes_a_new_default_version_the_oldest_deleted_at_five(
    aws: AWSClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bootstrap(aws)
    nodes = NAMES[2]
    for revision in range(1, 6):
        changed = policy_document("nodes")
        changed["Statement"][0]["Action"] = [*changed["Statement"][0]["Action"], f"ecr:Revision{revision}"]
        monkeypatch.setattr(
            bootstrap,
            "policy_document",
            lambda kind, c=changed: c if kind == "nodes" else policy_document(kind),
        )
        operations = _bootstrap(aws)
        assert "CreatePolicyVersion" in operations
        assert ("DeletePolicyVersion" in operations) == (revision == 5), operations
    policy = iam_inventory(aws)["policies"][nodes]
    assert policy["versions"] == ["v2", "v3", "v4", "v5", "v6"]
    assert policy["default"] == "v6"
    assert _bootstrap(aws) == []


def test_delete_removes_only_what_this_store_made(aws: AWSClients) -> None:
    _bootstrap(aws)
    steps, skipped = plan_delete(aws, observe(aws), "store-b")
    assert steps == []
    assert len(skipped) == 9
    assert all("capa-py store store-a" in s for s in skipped)
    with call_scope() as calls:
        steps, skipped = plan_delete(aws, observe(aws), STORE)
        apply_steps(aws, steps)
    assert skipped == []
    assert iam_inventory(aws) == {"roles": {}, "profiles": {}, "policies": {}}
    assert calls.mutating_operations() == {
        "iam:DeleteInstanceProfile": 3,
        "iam:DeletePolicy": 3,
        "iam:DeleteRole": 3,
        "iam:DetachRolePolicy": 4,
        "iam:RemoveRoleFromInstanceProfile": 3,
    }
    assert plan_delete(aws, observe(aws), STORE) == ([], [])


# -- the command --------------------------------------------------------------------------------------
def _capa(tmp_path: Path, moto_server: MotoServer) -> Capa:
    return Capa(state=tmp_path / "state.db", endpoint=moto_server.url)


def test_the_command_prints_the_plan_on_a_dry_run_and_changes_nothing(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path
) -> None:
    capa = _capa(tmp_path, moto_server)
    run = capa.ok("iam", "bootstrap", "--dry-run", "--aws-endpoint", moto_server.url)
    assert "Plan (dry run: nothing changed):" in run.stdout
    assert f"CreateRole nodes{ROLE_SUFFIX}" in run.stdout
    assert iam_inventory(aws) == {"roles": {}, "profiles": {}, "policies": {}}


def test_the_command_converges_then_reports_nothing_to_change(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path
) -> None:
    capa = _capa(tmp_path, moto_server)
    first = capa.ok("iam", "bootstrap", "-o", "json", "--aws-endpoint", moto_server.url).json()
    assert first["awsCalls"]["mutating"] == 16
    again = capa.ok("iam", "bootstrap", "-o", "json", "--aws-endpoint", moto_server.url).json()
    assert again["changes"] == []
    assert again["awsCalls"]["mutating"] == 0
    store_uid = iam_inventory(aws)["roles"][NAMES[0]]["tags"][STORE_TAG]
    assert store_uid  # the store's uid, as every resource this store makes carries it
    deleted = capa.ok("iam", "delete", "--aws-endpoint", moto_server.url)
    assert f"DeleteRole nodes{ROLE_SUFFIX}" in deleted.stdout
    assert iam_inventory(aws) == {"roles": {}, "profiles": {}, "policies": {}}


def test_the_command_refuses_another_stores_resources_with_exit_2(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path
) -> None:
    _capa(tmp_path / "other", moto_server).ok("iam", "bootstrap", "--aws-endpoint", moto_server.url)
    before = iam_inventory(aws)
    capa = _capa(tmp_path, moto_server)
    run = capa.run("iam", "bootstrap", "--aws-endpoint", moto_server.url)
    assert run.returncode == 2, run
    assert "never adopts another's resource" in run.stderr
    assert f"IAM role nodes{ROLE_SUFFIX} exists and was made by capa-py store" in run.stderr
    left = capa.ok("iam", "delete", "--aws-endpoint", moto_server.url)
    assert left.stdout.count("left alone:") == 9
    assert iam_inventory(aws) == before


def test_iam_policy_for_an_unknown_audience_is_refused_naming_the_option(tmp_path: Path) -> None:
    run = Capa(state=tmp_path / "state.db").run("iam", "policy", "--for", "everyone")
    assert run.returncode == 2
    assert "--for" in run.stderr
