"""The SSM Parameter Store parameter (a machine's bootstrap data chunk with ``ssm-parameter-store``) through
the engine, against moto over HTTP: strategy class 1 (``PutParameter`` takes ``Tags``) without a client
token and with a natural key (the name), and the edge cases of that class under fault injection — a crash
between the create and the record, a failed status write, a throttled create, a lost response — each
leaving one parameter, recorded, and nothing duplicated.

``PutParameter`` has no token on AWS either: what saves a repeated create is the lookup by tags, then by
name, before every create, and a repeat of a name that exists is refused (``ParameterAlreadyExists``)
rather than overwriting it (capa-py never sends ``Overwrite``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.errors import AlreadyExists, NotFound, Transient
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine, RetryableError
from capa_py.engine.errors import NaturalKeyTaken
from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.tags import managed_tags
from capa_py.engine.traits import StrategyClass
from capa_py.store import SQLiteStore
from resources.parameter import MAX_VALUE, Parameter, ParameterDesired
from tests.engine.support import Faults, FlakyStatusStore, Owner, SimulatedCrash, records
from tests.harness.faults import error_response

ROLE = "bootstrap-parameter-machine-0"
DESIRED = ParameterDesired("/cluster.x-k8s.io/0f5c-machine/0", "H4sIAAAAAAAA/chunkofbootstrapdata")


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
    return sorted(p["Name"] for p in aws.client("ssm").pages("DescribeParameters", "Parameters"))


def test_a_parameter_is_class_one_without_a_token_and_with_a_key() -> None:
    assert Parameter.traits.strategy is StrategyClass.TAG_ON_CREATE
    assert not AWS.effective("parameter", Parameter.traits).client_token
    assert MOTO.effective("parameter", Parameter.traits).natural_key
    assert Parameter(None).fingerprint(DESIRED) == {"name": DESIRED.name}  # type: ignore[arg-type]
    assert "chunk" not in repr(DESIRED), "the value stays out of reprs (and so out of logs)"


def test_ensure_puts_a_tagged_secure_string_and_finds_it_again(aws: AWSClients, owner: Owner) -> None:
    engine = Engine(MOTO)
    created = engine.ensure(Parameter(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name == created.id
    found = Parameter(aws).describe_by_id(DESIRED.name)
    assert found is not None
    assert found.tags["capa-py.io/role"] == ROLE
    assert found.attributes["type"] == "SecureString"
    stored = aws.client("ssm").call("GetParameter", Name=DESIRED.name, WithDecryption=True)
    assert stored["Parameter"]["Value"] == DESIRED.value
    again = engine.ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    assert again.id == created.id
    assert _names(aws) == [DESIRED.name]


def test_a_crash_after_put_parameter_is_found_by_its_tags(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    faults.crash_after(aws, "PutParameter", service="ssm")
    with pytest.raises(SimulatedCrash):
        Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    assert ROLE not in owner.status().resources

    Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_failed_status_write_is_retried_without_a_second_put(aws: AWSClients, owner: Owner) -> None:
    owner.store.fail_status_writes(records(ROLE))  # type: ignore[arg-type]
    with pytest.raises(RetryableError):
        Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    owner.store.heal()

    Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_throttled_put_parameter_is_retried(aws: AWSClients, owner: Owner) -> None:
    client = aws.client("ssm").raw
    sent: list[int] = []

    def throttle(request: Any, **_: Any) -> Any:
        sent.append(1)
        if len(sent) == 1:
            return error_response(client, request.url, "ThrottlingException", "Rate exceeded", 400)
        return None

    client.meta.events.register("before-send.ssm.PutParameter", throttle)
    try:
        Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    finally:
        client.meta.events.unregister("before-send.ssm.PutParameter", throttle)

    assert len(sent) == 2, "a throttled answer (in SSM's JSON), then the put"
    assert owner.status().resources[ROLE].id == DESIRED.name


def test_a_lost_response_is_not_repeated_blind_and_the_next_pass_adopts(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    faults.lose_response(aws, "PutParameter", service="ssm")
    with pytest.raises(Transient):
        Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    assert _names(aws) == [DESIRED.name], "a put without a token is not repeated after an unknown outcome"

    Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())

    assert owner.status().resources[ROLE].id == DESIRED.name
    assert _names(aws) == [DESIRED.name]


def test_a_repeated_put_of_a_taken_name_is_refused_not_overwritten(aws: AWSClients) -> None:
    Parameter(aws).create(DESIRED, managed_tags("alpha", ROLE), None)
    with pytest.raises(AlreadyExists):
        Parameter(aws).create(ParameterDesired(DESIRED.name, "another value"), None, None)
    stored = aws.client("ssm").call("GetParameter", Name=DESIRED.name, WithDecryption=True)
    assert stored["Parameter"]["Value"] == DESIRED.value


def test_a_name_another_cluster_holds_is_refused(aws: AWSClients, owner: Owner) -> None:
    Parameter(aws).create(DESIRED, managed_tags("other-cluster", ROLE), None)

    with pytest.raises(NaturalKeyTaken):
        Engine(MOTO).ensure(Parameter(aws), ROLE, DESIRED, owner.scope())
    assert ROLE not in owner.status().resources


def test_a_value_over_the_standard_tier_is_refused_before_any_call(aws: AWSClients) -> None:
    with pytest.raises(ValueError, match="longer than 4096"):
        Parameter(aws).create(ParameterDesired("/cluster.x-k8s.io/big/0", "x" * (MAX_VALUE + 1)), None, None)
    assert _names(aws) == []


def test_remove_deletes_the_recorded_parameter_and_forgets_it(aws: AWSClients, owner: Owner) -> None:
    engine = Engine(MOTO)
    engine.ensure(Parameter(aws), ROLE, DESIRED, owner.scope())

    engine.remove(Parameter(aws), ROLE, owner.scope())

    assert ROLE not in owner.status().resources
    assert _names(aws) == []
    with pytest.raises(NotFound):
        Parameter(aws).delete(DESIRED.name)
