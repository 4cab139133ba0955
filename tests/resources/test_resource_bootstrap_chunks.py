"""A machine's bootstrap data chunk through the engine, against moto over HTTP, on each backend: a Secrets
Manager secret (``CreateSecret``) and an SSM Parameter Store parameter (``PutParameter``). Both are strategy
class 1 (tags on create) with the name as natural key; the edge cases of that class under fault injection —
a crash between the create and the record, a failed status write, a throttled create, a lost response —
each leave one chunk, recorded, and nothing duplicated.

moto ignores ``ClientRequestToken`` (the ``moto`` profile turns tokens off) and ``PutParameter`` has no token
on AWS either: what saves a repeated create here is the lookup by tags, then by name, before every create.
The backend-specific facts (traits, Parameter Store's refusals) are in test_resource_secret.py and
test_resource_parameter.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import Transient
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine, RetryableError
from capa_py.engine.errors import ClusterOwnedElsewhere, NaturalKeyTaken
from capa_py.engine.profiles import MOTO
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tags import managed_tags
from capa_py.store import SQLiteStore
from resources.parameter import Parameter, ParameterDesired
from resources.secret import Secret, SecretDesired
from tests.engine.support import Faults, FlakyStatusStore, Owner, SimulatedCrash, records
from tests.harness.faults import error_response
from tests.resources.builders import CLUSTER


@dataclass(frozen=True)
class Chunks:
    """One backend as these tests drive it."""

    resource: Callable[[AWSClients], ResourceClass[Any]]
    role: str
    desired: Any
    service: str
    create_operation: str
    names: Callable[[AWSClients], list[str]]
    stored: Callable[[AWSClients, str], Any]


def _secret_names(aws: AWSClients) -> list[str]:
    return sorted(s["Name"] for s in aws.client("secretsmanager").pages("ListSecrets", "SecretList"))


def _secret_value(aws: AWSClients, name: str) -> Any:
    return aws.client("secretsmanager").call("GetSecretValue", SecretId=name)["SecretBinary"]


def _parameter_names(aws: AWSClients) -> list[str]:
    return sorted(p["Name"] for p in aws.client("ssm").pages("DescribeParameters", "Parameters"))


def _parameter_value(aws: AWSClients, name: str) -> Any:
    return aws.client("ssm").call("GetParameter", Name=name, WithDecryption=True)["Parameter"]["Value"]


SECRETS = Chunks(
    Secret,
    "bootstrap-secret-machine-0",
    SecretDesired("aws.cluster.x-k8s.io/0f5c-machine-0", b"\x1f\x8b chunk of bootstrap data"),
    "secretsmanager",
    "CreateSecret",
    _secret_names,
    _secret_value,
)
PARAMETERS = Chunks(
    Parameter,
    "bootstrap-parameter-machine-0",
    ParameterDesired("/cluster.x-k8s.io/0f5c-machine/0", "H4sIAAAAAAAA/chunkofbootstrapdata"),
    "ssm",
    "PutParameter",
    _parameter_names,
    _parameter_value,
)


def _value(desired: Any) -> Any:
    return desired.data if isinstance(desired, SecretDesired) else desired.value


@pytest.fixture(params=[SECRETS, PARAMETERS], ids=["secrets-manager", "ssm-parameter-store"])
def backend(request: pytest.FixtureRequest) -> Chunks:
    chosen: Chunks = request.param
    return chosen


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    with SQLiteStore(tmp_path / "state.db") as store:
        yield Owner.create(FlakyStatusStore(store))


@pytest.fixture
def faults() -> Iterator[Faults]:
    injected = Faults()
    yield injected
    injected.clear()


def test_ensure_creates_tags_and_records_then_finds_it_again(
    aws: AWSClients, owner: Owner, backend: Chunks
) -> None:
    engine = Engine(MOTO)
    name = backend.desired.name
    created = engine.ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())

    assert owner.status().resources[backend.role].id == name == created.id
    found = backend.resource(aws).describe_by_id(name)
    assert found is not None
    assert found.tags["capa-py.io/role"] == backend.role
    assert backend.stored(aws, name) == _value(backend.desired)
    again = engine.ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    assert again.id == created.id
    assert backend.names(aws) == [name]


def test_a_crash_after_the_create_is_found_by_its_tags(
    aws: AWSClients, owner: Owner, faults: Faults, backend: Chunks
) -> None:
    faults.crash_after(aws, backend.create_operation, service=backend.service)
    with pytest.raises(SimulatedCrash):
        Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    assert backend.role not in owner.status().resources

    Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())

    assert owner.status().resources[backend.role].id == backend.desired.name
    assert backend.names(aws) == [backend.desired.name]


def test_a_failed_status_write_is_retried_without_a_second_create(
    aws: AWSClients, owner: Owner, backend: Chunks
) -> None:
    owner.store.fail_status_writes(records(backend.role))  # type: ignore[arg-type]
    with pytest.raises(RetryableError):
        Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    owner.store.heal()

    Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())

    assert owner.status().resources[backend.role].id == backend.desired.name
    assert backend.names(aws) == [backend.desired.name]


def test_a_throttled_create_is_retried(aws: AWSClients, owner: Owner, backend: Chunks) -> None:
    client = aws.client(backend.service).raw
    sent: list[int] = []

    def throttle(request: Any, **_: Any) -> Any:
        sent.append(1)
        if len(sent) == 1:
            return error_response(client, request.url, "ThrottlingException", "Rate exceeded", 400)
        return None

    event = f"before-send.{backend.service}.{backend.create_operation}"
    client.meta.events.register(event, throttle)
    try:
        Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    finally:
        client.meta.events.unregister(event, throttle)

    assert len(sent) == 2, "a throttled answer (in the service's JSON), then the create"
    assert owner.status().resources[backend.role].id == backend.desired.name


def test_a_lost_response_is_not_repeated_blind_and_the_next_pass_adopts(
    aws: AWSClients, owner: Owner, faults: Faults, backend: Chunks
) -> None:
    faults.lose_response(aws, backend.create_operation, service=backend.service)
    with pytest.raises(Transient):
        Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    assert backend.names(aws) == [backend.desired.name], "a create without a token is not repeated blind"

    Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())

    assert owner.status().resources[backend.role].id == backend.desired.name
    assert backend.names(aws) == [backend.desired.name]


def test_a_name_another_cluster_holds_is_refused(aws: AWSClients, owner: Owner, backend: Chunks) -> None:
    backend.resource(aws).create(backend.desired, managed_tags("other-cluster", backend.role), None)

    with pytest.raises(NaturalKeyTaken):
        Engine(MOTO).ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())
    assert backend.role not in owner.status().resources


def test_remove_deletes_the_recorded_chunk_and_forgets_it(
    aws: AWSClients, owner: Owner, backend: Chunks
) -> None:
    engine = Engine(MOTO)
    engine.ensure(backend.resource(aws), backend.role, backend.desired, owner.scope())

    engine.remove(backend.resource(aws), backend.role, owner.scope())

    assert backend.role not in owner.status().resources
    assert backend.names(aws) == []


# -- Secrets Manager: create first, delete by the recorded name ----------------------------------------


def test_a_secret_is_created_without_a_lookup_first(aws: AWSClients, owner: Owner) -> None:
    """``CreateSecret`` refuses a taken name and then makes nothing, so a lookup before it could only find
    what its refusal finds: the create is the only call."""
    with call_scope() as calls:
        Engine(MOTO).ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())
    assert calls.by_operation() == {"secretsmanager:CreateSecret": 1}
    assert owner.status().resources[SECRETS.role].id == SECRETS.desired.name


def test_a_crash_after_create_secret_is_adopted_on_the_refusal_of_the_next_create(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    """The proof that the lookup before the create was not needed: the secret a crashed pass made is found
    by the next create's refusal, described by its name and adopted — one secret, recorded."""
    faults.crash_after(aws, "CreateSecret", service="secretsmanager")
    with pytest.raises(SimulatedCrash):
        Engine(MOTO).ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())
    faults.clear()

    with call_scope() as calls:
        Engine(MOTO).ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())

    assert calls.by_operation() == {"secretsmanager:CreateSecret": 1, "secretsmanager:DescribeSecret": 1}
    assert owner.status().resources[SECRETS.role].id == SECRETS.desired.name
    assert _secret_names(aws) == [SECRETS.desired.name]


def test_a_secret_another_store_made_under_the_name_is_never_adopted(aws: AWSClients, owner: Owner) -> None:
    """This cluster's name and role, another store's uid: the refusal finds it and the engine stops."""
    tags = managed_tags(CLUSTER, SECRETS.role, store_uid="another-store")
    Secret(aws).create(SECRETS.desired, tags, None)

    with pytest.raises(ClusterOwnedElsewhere):
        Engine(MOTO).ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())
    assert SECRETS.role not in owner.status().resources
    assert _secret_names(aws) == [SECRETS.desired.name]


def test_a_recorded_secret_is_deleted_by_its_name_alone(aws: AWSClients, owner: Owner) -> None:
    """The id is the name: no describe before the delete, and a name already gone is done."""
    engine = Engine(MOTO)
    engine.ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())
    with call_scope() as calls:
        engine.remove(Secret(aws), SECRETS.role, owner.scope())
    assert calls.by_operation() == {"secretsmanager:DeleteSecret": 1}
    assert _secret_names(aws) == []

    engine.ensure(Secret(aws), SECRETS.role, SECRETS.desired, owner.scope())
    Secret(aws).delete(SECRETS.desired.name)  # gone behind the engine's back
    engine.remove(Secret(aws), SECRETS.role, owner.scope())
    assert SECRETS.role not in owner.status().resources
