"""``capa iam policy``: the controller's ``sts:AssumeRole`` is granted on the roles it assumes, read from the
store's role identities and ``--assume-role``, and on ``*`` (with a warning) only when none is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capa_app.iam.policy import ASSUME_ROLE, assumed_roles, policy_document
from capa_py.api.aws_identity import AWSClusterRoleIdentity, AWSClusterStaticIdentity
from capa_py.api.meta import KubeObject
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from tests.e2e.e2e_support import Capa, Run

DIRECT = "arn:aws:iam::222222222222:role/capa-direct"
VIA_CONTROLLER = "arn:aws:iam::333333333333:role/capa-via-controller"
FROM_KEYS = "arn:aws:iam::444444444444:role/capa-from-keys"
GIVEN = "arn:aws:iam::555555555555:role/capa-given"


def role(name: str, arn: str, source: dict[str, str] | None = None) -> AWSClusterRoleIdentity:
    spec: dict[str, Any] = {"roleARN": arn, "allowedNamespaces": {}}
    if source is not None:
        spec["sourceIdentityRef"] = source
    return AWSClusterRoleIdentity.model_validate({"metadata": {"name": name}, "spec": spec})


def identities() -> list[KubeObject]:
    """A role assumed with the controller's own credentials, one through the controller identity, and one
    assumed with a static identity's key (the controller never assumes that one itself)."""
    return [
        role("direct", DIRECT),
        role("via-controller", VIA_CONTROLLER, {"kind": "AWSClusterControllerIdentity", "name": "default"}),
        AWSClusterStaticIdentity.model_validate(
            {"metadata": {"name": "keys"}, "spec": {"secretRef": "keys", "allowedNamespaces": {}}}
        ),
        role("from-keys", FROM_KEYS, {"kind": "AWSClusterStaticIdentity", "name": "keys"}),
    ]


def stored(state: Path, objects: list[KubeObject]) -> Capa:
    with SQLiteStore(state) as store:
        apply_objects(store, objects)
    return Capa(state=state)


def assume_statements(run: Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run
    document = json.loads(run.stdout)
    return [s for s in document["Statement"] if ASSUME_ROLE in s["Action"]]


def test_the_roles_come_from_the_stores_role_identities_the_controller_assumes_itself(tmp_path: Path) -> None:
    capa = stored(tmp_path / "state.db", identities())

    for audience in ("controller", "operator"):
        statements = assume_statements(capa.run("iam", "policy", "--for", audience))
        assert [(s["Action"], s["Resource"]) for s in statements] == [
            ([ASSUME_ROLE], [DIRECT, VIA_CONTROLLER])
        ], "AssumeRole only on the roles assumed with the controller's own credentials"
        assert all(ASSUME_ROLE not in s["Action"] or s["Resource"] != "*" for s in statements)


def test_assume_role_adds_roles_and_repeats(tmp_path: Path) -> None:
    capa = stored(tmp_path / "state.db", identities())
    other = "arn:aws:iam::666666666666:role/capa-other"

    run = capa.run("iam", "policy", "--assume-role", GIVEN, "--assume-role", other)

    [statement] = assume_statements(run)
    assert statement["Resource"] == sorted([DIRECT, VIA_CONTROLLER, GIVEN, other])
    assert "warning" not in run.stderr


def test_without_a_store_the_given_roles_alone_are_granted(tmp_path: Path) -> None:
    run = Capa(state=tmp_path / "none.db").run("iam", "policy", "--assume-role", GIVEN)

    [statement] = assume_statements(run)
    assert statement["Resource"] == GIVEN
    assert not (tmp_path / "none.db").exists(), "printing a policy creates no store"


def test_no_known_role_falls_back_to_every_role_with_a_warning(tmp_path: Path) -> None:
    run = Capa(state=tmp_path / "none.db").run("iam", "policy", "--for", "controller")

    [statement] = assume_statements(run)
    assert statement["Resource"] == "*"
    assert "warning: no role identity is known" in run.stderr
    assert '"*"' in run.stderr


def test_roles_only_assumed_from_other_identities_need_no_grant(tmp_path: Path) -> None:
    capa = stored(tmp_path / "state.db", [i for i in identities() if i.name in ("keys", "from-keys")])

    run = capa.run("iam", "policy")

    assert assume_statements(run) == []
    assert "sts:AssumeRole is not granted" in run.stderr


@pytest.mark.parametrize(
    "arn", ["arn:aws:iam::222222222222:user/someone", "capa-direct", "arn:aws:iam::2222:role/x"]
)
def test_a_malformed_role_arn_is_refused_naming_the_option(tmp_path: Path, arn: str) -> None:
    run = Capa(state=tmp_path / "none.db").run("iam", "policy", "--assume-role", arn)

    assert run.returncode == 2, run
    assert "--assume-role" in run.stderr
    assert run.stdout == ""


def test_assume_role_is_refused_for_the_machines_policies(tmp_path: Path) -> None:
    run = Capa(state=tmp_path / "none.db").run("iam", "policy", "--for", "nodes", "--assume-role", GIVEN)

    assert run.returncode == 2, run
    assert "--assume-role" in run.stderr


def test_the_machines_policies_never_grant_assume_role() -> None:
    for kind in ("nodes", "control-plane"):
        assert all(ASSUME_ROLE not in s["Action"] for s in policy_document(kind)["Statement"])


def test_assumed_roles_keeps_the_roles_the_controller_assumes_itself() -> None:
    assert assumed_roles(identities()) == (DIRECT, VIA_CONTROLLER)
