"""The Secrets Manager secret (a machine's bootstrap data chunk) through the engine, against moto over HTTP:
strategy class 1 (``CreateSecret`` takes ``Tags``) with a natural key (the name), and the edge cases of that
class under fault injection — a crash between the create and the record, a failed status write, a throttled
create, a lost response — each leaving one secret, recorded, and nothing duplicated.

moto ignores ``ClientRequestToken`` (the ``moto`` profile turns tokens off), so what saves a repeated create
here is the lookup by tags, then by name, before every create; on AWS the token answers a repeat too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.errors import Transient
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine, RetryableError
from capa_py.engine.errors import NaturalKeyTaken
from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.tags import managed_tags
from capa_py.engine.traits import StrategyClass
from capa_py.store import SQLiteStore
from resources.secret import Secret, SecretDesired
from tests.engine.support import Faults, FlakyStatusStore, Owner, SimulatedCrash, records
from tests.harness.faults import error_response

ROLE = "bootstrap-secret-0"
DESIRED = SecretDesired("aws.cluster.x-k8s.io/0f5c-machine-0", b"\x1f\x8b chunk of bootstrap data")


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    with SQLiteStore(tmp_path / "state.db") as store:
        yield Owner.create(FlakyStatusStore(store))


@pytest.fixture
def faults() -> Iterator[Faults]:
    injected = Faults()
    yield injected
    injected.clear()


def _names(aws: AWSClients) -> list[str]:
    return sorted(s["Name"] for s in aws.client("secretsmanager").pages("ListSecrets", "SecretList"))


def test_a_secret_is_class_one_with_a_token_and_a_key() -> None:
    assert Secret.traits.strategy is StrategyClass.TAG_ON_CREATE
    assert AWS.effective("secret", Secret.traits).client_token
    assert not MOTO.effective("secret", Secret.traits).client_token
    assert Secret(None).fingerprint(DESIRED) == {"name": DESIRED.name}  # type: ignore[arg-type]
    assert "chunk" not in repr(DESIRED), "the contents stay out of reprs (and so out of logs)"


def test_ensure_creates_tags_and_records_then_finds_it_again(aws: AWSClients, owner: Owner) -> None:
    engine = Engine(MOTO)
    created = engine.ensure(Secret(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name == created.id
    found = Secret(aws).describe_by_id(DESIRED.name)
    assert found is not None
    assert found.tags["capa-py.io/role"] == ROLE
    again = engine.ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    assert again.id == created.id
    assert _names(aws) == [DESIRED.name]


def test_a_crash_after_create_secret_is_found_by_its_tags(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    faults.crash_after(aws, "CreateSecret", service="secretsmanager")
    with pytest.raises(SimulatedCrash):
        Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    assert ROLE not in owner.status().resources

    Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_failed_status_write_is_retried_without_a_second_secret(aws: AWSClients, owner: Owner) -> None:
    owner.store.fail_status_writes(records(ROLE))  # type: ignore[arg-type]
    with pytest.raises(RetryableError):
        Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    owner.store.heal()

    Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_throttled_create_secret_is_retried(aws: AWSClients, owner: Owner) -> None:
    client = aws.client("secretsmanager").raw
    sent: list[int] = []

    def throttle(request: Any, **_: Any) -> Any:
        sent.append(1)
        if len(sent) == 1:
            return error_response(client, request.url, "ThrottlingException", "Rate exceeded", 400)
        return None

    client.meta.events.register("before-send.secretsmanager.CreateSecret", throttle)
    try:
        Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    finally:
        client.meta.events.unregister("before-send.secretsmanager.CreateSecret", throttle)

    assert len(sent) == 2, "a throttled answer (in Secrets Manager's JSON), then the create"
    assert owner.status().resources[ROLE].id == DESIRED.name


def test_a_lost_response_is_not_repeated_blind_and_the_next_pass_adopts(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    faults.lose_response(aws, "CreateSecret", service="secretsmanager")
    with pytest.raises(Transient):
        Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    assert _names(aws) == [DESIRED.name], "a create without a token is not repeated after an unknown outcome"

    Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_name_another_cluster_holds_is_refused(aws: AWSClients, owner: Owner) -> None:
    tags = managed_tags("other-cluster", ROLE)
    Secret(aws).create(DESIRED, tags, None)

    with pytest.raises(NaturalKeyTaken):
        Engine(MOTO).ensure(Secret(aws), ROLE, DESIRED, owner.scope())
    assert ROLE not in owner.status().resources


def test_remove_deletes_the_recorded_secret_and_forgets_it(aws: AWSClients, owner: Owner) -> None:
    engine = Engine(MOTO)
    engine.ensure(Secret(aws), ROLE, DESIRED, owner.scope())

    engine.remove(Secret(aws), ROLE, owner.scope())

    assert ROLE not in owner.status().resources
    assert _names(aws) == []
