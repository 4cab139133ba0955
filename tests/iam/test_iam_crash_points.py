"""Crash consistency of ``capa iam bootstrap`` and ``capa iam delete``: SIGKILLed right after each of their
mutating calls returns (``tests/harness/crashing_capa.py``), a second, fault-free run converges: exactly the
bootstrap's roles, instance profiles and policies (nothing duplicated, nothing half-linked), or nothing left
after a delete (nothing orphaned). IAM names are unique, so a duplicate is impossible by construction; what
these pin is that every crash point is picked up where it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.aws.session import AWSClients
from capa_py.engine.tags import STORE_TAG
from tests.e2e.e2e_support import Capa
from tests.harness.faults import CRASH_AFTER_MUTATING
from tests.harness.moto_server import MotoServer
from tests.iam.iam_support import iam_inventory
from tests.iam.test_iam_bootstrap import MUTATING_CALLS, expected_inventory

pytestmark = pytest.mark.slow(minutes=3)


def _crash_points(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path, command: str, prepare: bool
) -> list[str]:
    problems: list[str] = []
    for n in range(1, MUTATING_CALLS + 1):
        moto_server.reset()
        capa = Capa(state=tmp_path / f"{command}-{n}" / "state.db", endpoint=moto_server.url)
        endpoint = ("--aws-endpoint", moto_server.url)
        if prepare:
            capa.ok("iam", "bootstrap", *endpoint)
        crashed = capa.run("iam", command, *endpoint, faults={CRASH_AFTER_MUTATING: str(n)})
        if crashed.returncode != -9:
            problems.append(
                f"crash point {n}: the run was not killed after its mutating call {n}:\n{crashed}"
            )
            continue
        again = capa.run("iam", command, *endpoint)
        if again.returncode != 0:
            problems.append(f"crash point {n}: the run after the crash failed:\n{again}")
            continue
        found = iam_inventory(aws)
        if command == "bootstrap":
            uid = (
                found["roles"]
                .get("nodes.cluster-api-provider-aws.sigs.k8s.io", {})
                .get("tags", {})
                .get(STORE_TAG)
            )
            wanted = expected_inventory(uid or "?")
        else:
            wanted = {"roles": {}, "profiles": {}, "policies": {}}
        if found != wanted:
            problems.append(f"crash point {n}: IAM after the re-run is {found}, not {wanted}")
    return problems


def test_bootstrap_killed_after_any_mutating_call_converges_when_run_again(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path
) -> None:
    problems = _crash_points(aws, moto_server, tmp_path, "bootstrap", prepare=False)
    assert not problems, "\n".join(problems)


def test_delete_killed_after_any_mutating_call_leaves_nothing_when_run_again(
    aws: AWSClients, moto_server: MotoServer, tmp_path: Path
) -> None:
    problems = _crash_points(aws, moto_server, tmp_path, "delete", prepare=True)
    assert not problems, "\n".join(problems)
