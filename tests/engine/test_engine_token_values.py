"""Client tokens are a pure function of the owner's uid and the role: the value is pinned, and a separate
Python process (another hash seed, another start time) derives exactly the same string.

A token that changed between processes would turn a create retried after a crash into a second resource;
the in-process tests in ``test_engine_tokens.py`` cannot see that, these can.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capa_py.engine.tokens import client_token

ROOT = Path(__file__).resolve().parents[2]
UID = "3f1c2a9e-7b4d-4e51-9a0c-5d8e6f2b1a47"

KNOWN = {
    "nat-gateway-us-east-1a": "668c96824858c57942376a5909ef2ee323c1ad88c70f78c356a41aa540db0f85",
    "instance": "903fb1683c588ab3a521c971300e6200a7de8196f3e59b794ec4f131a30fcac2",
}
"""sha256("capa-py:<uid>:<role>") in hex, computed once; changing the derivation would make every
interrupted create made before the upgrade a duplicate after it."""


@pytest.mark.parametrize("role", sorted(KNOWN))
def test_client_token_has_its_known_value(role: str) -> None:
    assert client_token(UID, role) == KNOWN[role]


def _token_in_subprocess(role: str, hash_seed: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "PYTHONHASHSEED": hash_seed,
    }
    code = (
        "import sys\n"
        "from capa_py.engine.tokens import client_token\n"
        "print(client_token(sys.argv[1], sys.argv[2]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, UID, role],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("role", sorted(KNOWN))
def test_another_process_derives_the_same_token(role: str) -> None:
    here = client_token(UID, role)
    elsewhere = {_token_in_subprocess(role, seed) for seed in ("1", "2")}
    assert elsewhere == {here}, f"another process derived {elsewhere}, this one {here}"
