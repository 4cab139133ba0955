"""``capa tink agent-credentials``: issues a random token into the Secret a Hardware's
``spec.agentCredentialsRef`` names (creating it and the reference), writes it to a 0600 file or prints it
alone, never both; a new token replaces the old one; and the agent's token and certificate flags are
checked (exit 2 naming the flag)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from capa_py.api.core import Secret
from capa_py.api.tinkerbell import Hardware, LocalObjectReference
from capa_py.operations import apply_objects
from capa_py.store import SQLiteStore
from capa_py.tinkerbell.agentauth import TOKEN_KEY
from tests.cli.cli_support import Cli
from tests.tinkerbell.server_world import hardware


def stored(state: Path, kind: type[Hardware] | type[Secret], name: str) -> Hardware | Secret:
    with SQLiteStore(state) as store:
        return store.get(kind, name, "default")


def test_a_token_is_issued_into_a_new_secret_the_hardware_then_references(
    cli: Cli, state: Path, tmp_path: Path
) -> None:
    with SQLiteStore(state) as store:
        apply_objects(store, [hardware("hw1", "aa:bb:cc:dd:ee:01")])
    token_file = tmp_path / "hw1.token"
    result = cli("tink", "agent-credentials", "hw1", "--token-file", str(token_file))
    assert result.exit_code == 0, result
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token not in result.stdout + result.stderr, "the token is written, not printed"
    assert f"capa tink agent --id hw1 --token-file {token_file}" in result.stdout
    machine = stored(state, Hardware, "hw1")
    assert isinstance(machine, Hardware)
    assert machine.spec.agent_credentials_ref == LocalObjectReference(name="hw1-agent-credentials")
    secret = stored(state, Secret, "hw1-agent-credentials")
    assert isinstance(secret, Secret)
    assert secret.value(TOKEN_KEY).decode() == token

    again = cli("tink", "agent-credentials", "hw1")
    assert again.exit_code == 0, again
    new = again.stdout.strip()
    assert new != token, "a new token each time"
    assert "CAPA_TINK_AGENT_TOKEN" in again.stderr
    rotated = stored(state, Secret, "hw1-agent-credentials")
    assert isinstance(rotated, Secret)
    assert rotated.value(TOKEN_KEY).decode() == new, "the old token is replaced"


def test_an_existing_reference_is_kept_and_a_hardware_to_come_gets_its_secret(cli: Cli, state: Path) -> None:
    machine = hardware("hw1", "aa:bb:cc:dd:ee:01")
    machine.spec.agent_credentials_ref = LocalObjectReference(name="my-creds")
    with SQLiteStore(state) as store:
        apply_objects(store, [machine])
    result = cli("tink", "agent-credentials", "hw1")
    assert result.exit_code == 0, result
    secret = stored(state, Secret, "my-creds")
    assert isinstance(secret, Secret)
    assert secret.value(TOKEN_KEY).decode() == result.stdout.strip()

    later = cli("tink", "agent-credentials", "hw-later")
    assert later.exit_code == 0, later
    assert "give it spec.agentCredentialsRef: {name: hw-later-agent-credentials}" in later.stderr
    secret = stored(state, Secret, "hw-later-agent-credentials")
    assert isinstance(secret, Secret)
    assert secret.value(TOKEN_KEY).decode() == later.stdout.strip()


def test_a_bad_hardware_name_exits_2(cli: Cli) -> None:
    result = cli("tink", "agent-credentials", "Not_A_Name")
    assert result.exit_code == 2, result
    assert "HARDWARE 'Not_A_Name'" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--token-file", "/nonexistent/token"],
            "--token-file /nonexistent/token: No such file or directory",
        ),
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-cert needs --tls-ca"),
    ],
)
def test_bad_agent_credential_flags_exit_2_naming_the_flag(cli: Cli, flags: list[str], message: str) -> None:
    result = cli("tink", "agent", "--id", "hw1", *flags)
    assert result.exit_code == 2, result
    assert message in result.stderr


def test_an_empty_token_file_exits_2(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    result = cli("tink", "agent", "--id", "hw1", "--token-file", str(empty))
    assert result.exit_code == 2, result
    assert f"--token-file {empty}: the file is empty" in result.stderr
