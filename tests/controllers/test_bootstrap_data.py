"""A machine's bootstrap data goes to AWS Secrets Manager, not into its instance's user data (CAPA's default).

Against moto over HTTP, with the real controllers: the data is gzipped and stored in chunks of secrets named
``aws.cluster.x-k8s.io/<uid>-<n>`` before ``RunInstances``; the instance's user data is the script that
fetches them (no contents); the secrets are deleted once the instance runs and when the machine is deleted;
``insecureSkipSecretsManager`` keeps the data in the user data; a machine that keeps its instance id but lost
its status (a move) stores nothing again; and the crash points around the new calls leave no duplicate and
no orphan. moto ignores ``ClientRequestToken`` (the ``moto`` endpoint profile turns tokens off): a secret
left by a crash is found by its name.
"""

from __future__ import annotations

import base64
import gzip
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine, AWSMachineStatus, CloudInit
from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.cluster import Machine
from capa_py.api.core import Secret
from capa_py.api.machinesets import MachineDeployment
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import register_client_hook
from capa_py.runtime.queue import ObjectKey
from controllers.awsmachine import AWSMachineController
from controllers.services.bootstrap import CHUNK_SIZE, PARAMETER_CHUNK_SIZE
from tests.audit.helpers import crash_after, crashing
from tests.controllers.conftest import Harness
from tests.harness.faults import FailRule, Faults

MACHINE = "demo-control-plane-0"
BIG = "#cloud-config\nwrite_files:\n  - content: " + base64.b64encode(os.urandom(30_000)).decode() + "\n"
"""Bootstrap data larger than EC2's 16 KB of user data, and several chunks once gzipped."""


@contextmanager
def created_secrets() -> Iterator[list[dict[str, Any]]]:
    """The parameters of every ``CreateSecret`` the clients made inside the block send."""
    seen: list[dict[str, Any]] = []

    def hook(raw: Any, service: str) -> None:
        def note(params: dict[str, Any], **_: Any) -> None:
            seen.append(dict(params))

        raw.meta.events.register("provide-client-params.secretsmanager.CreateSecret", note)

    unregister = register_client_hook(hook)
    try:
        yield seen
    finally:
        unregister()


@contextmanager
def refused_creates(service: str, operation: str) -> Iterator[list[str]]:
    """The error codes of every ``operation`` AWS refused inside the block."""
    refused: list[str] = []

    def hook(raw: Any, service_name: str) -> None:
        def note(parsed: dict[str, Any], **_: Any) -> None:
            code = parsed.get("Error", {}).get("Code")
            if code:
                refused.append(str(code))

        raw.meta.events.register(f"after-call.{service}.{operation}", note)

    unregister = register_client_hook(hook)
    try:
        yield refused
    finally:
        unregister()


@contextmanager
def created_chunks(backend: Backend) -> Iterator[list[dict[str, Any]]]:
    """The parameters of every create of ``backend``'s chunks the clients made inside the block send."""
    seen: list[dict[str, Any]] = []

    def hook(raw: Any, service: str) -> None:
        def note(params: dict[str, Any], **_: Any) -> None:
            seen.append(dict(params))

        raw.meta.events.register(f"provide-client-params.{backend.service}.{backend.create_operation}", note)

    unregister = register_client_hook(hook)
    try:
        yield seen
    finally:
        unregister()


@dataclass(frozen=True)
class Backend:
    """A bootstrap data backend as these tests drive it: what the machine's spec says, the create call of
    a chunk, the engine role's prefix, the chunk size, and how to list what is left."""

    cloud_init: CloudInit | None
    service: str
    create_operation: str
    role_prefix: str
    chunk_size: int
    listed: Callable[[Harness], list[str]]

    def __str__(self) -> str:
        return self.service


def _secret_names(harness: Harness) -> list[str]:
    return sorted(s["Name"] for s in harness.aws.client("secretsmanager").pages("ListSecrets", "SecretList"))


def _parameter_names(harness: Harness) -> list[str]:
    return sorted(p["Name"] for p in harness.aws.client("ssm").pages("DescribeParameters", "Parameters"))


SECRETS = Backend(None, "secretsmanager", "CreateSecret", "bootstrap-secret", CHUNK_SIZE, _secret_names)
PARAMETERS = Backend(
    CloudInit(secure_secrets_backend="ssm-parameter-store"),
    "ssm",
    "PutParameter",
    "bootstrap-parameter",
    PARAMETER_CHUNK_SIZE,
    _parameter_names,
)
BACKENDS = pytest.mark.parametrize(
    "backend", [SECRETS, PARAMETERS], ids=["secrets-manager", "ssm-parameter-store"]
)


def _secrets(harness: Harness) -> list[dict[str, Any]]:
    return list(harness.aws.client("secretsmanager").pages("ListSecrets", "SecretList"))


def _user_data(harness: Harness, name: str = MACHINE) -> bytes:
    instance_id = harness.store.get(AWSMachine, name, "default").status.instance_id
    attribute = harness.aws.ec2.call(
        "DescribeInstanceAttribute", InstanceId=instance_id, Attribute="userData"
    )
    return base64.b64decode(attribute["UserData"]["Value"])


def _with_bootstrap(objects: list[KubeObject], value: str) -> list[KubeObject]:
    for obj in objects:
        if isinstance(obj, Secret):
            obj.string_data = {"value": value}
    return objects


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def _control_plane(objects: list[KubeObject]) -> AWSMachine:
    found = next(o for o in objects if isinstance(o, AWSMachine) and o.name == MACHINE)
    assert isinstance(found, AWSMachine)
    return found


def test_bootstrap_data_is_stored_in_secrets_manager_and_fetched_by_the_instance(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(_with_bootstrap(example(), BIG)))
    with created_secrets() as created:
        harness.pool = harness.new_pool()
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    machine = harness.store.get(AWSMachine, MACHINE, "default")
    prefix = f"aws.cluster.x-k8s.io/{machine.uid}"
    mine = sorted((p for p in created if p["Name"].startswith(prefix)), key=lambda p: p["Name"])
    packed = gzip.compress(BIG.encode(), mtime=0)
    assert len(mine) == -(-len(packed) // CHUNK_SIZE) > 1, [p["Name"] for p in mine]
    assert [p["Name"] for p in mine] == [f"{prefix}-{n}" for n in range(len(mine))]
    assert all(len(p["SecretBinary"]) <= CHUNK_SIZE for p in mine)
    assert gzip.decompress(b"".join(p["SecretBinary"] for p in mine)) == BIG.encode()
    tags = {t["Key"]: t["Value"] for t in mine[0]["Tags"]}
    assert tags["sigs.k8s.io/cluster-api-provider-aws/cluster/demo"] == "owned"
    assert tags["capa-py.io/role"] == f"bootstrap-secret-{MACHINE}-0"

    user_data = _user_data(harness)
    assert user_data.startswith(b"#!/bin/bash")
    assert f"prefix={prefix}".encode() in user_data
    assert f"count={len(mine)}".encode() in user_data
    assert b"#cloud-config" not in user_data
    assert BIG[-200:].encode() not in user_data
    assert len(user_data) < 4096, "the user data is a small script, whatever the data's size"

    assert _secrets(harness) == [], "every machine's secrets are deleted once its instance runs"
    assert machine.spec.cloud_init is not None
    assert machine.spec.cloud_init.secret_prefix == prefix, "kept in the spec, which a move keeps"
    assert machine.spec.cloud_init.secret_count is None, "cleared once the secrets are deleted"
    assert not [role for role in machine.status.resources if role.startswith("bootstrap-secret")]
    assert machine.status.ready


def test_insecure_skip_secrets_manager_puts_the_data_in_the_user_data(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = example()
    _control_plane(objects).spec.cloud_init = CloudInit(insecure_skip_secrets_manager=True)
    objects = _targets(harness.apply(objects))
    with created_secrets() as created:
        harness.pool = harness.new_pool()
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    machine = harness.store.get(AWSMachine, MACHINE, "default")
    assert _user_data(harness) == harness.store.get(Secret, "demo-bootstrap", "default").value("value")
    assert not [p for p in created if machine.uid in p["Name"]], "no secret for the machine that opts out"
    assert len(created) == 2, "the two workers still use Secrets Manager"


def test_ssm_parameter_store_is_accepted() -> None:
    """Built (tests/controllers/test_bootstrap_parameters.py): no longer refused."""
    machine = AWSMachine.model_validate(
        {
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {
                "instanceType": "t3.medium",
                "cloudInit": {"secureSecretsBackend": "ssm-parameter-store"},
            },
        }
    )
    assert machine.semantic_issues() == []


def test_reapplying_the_manifest_keeps_where_the_secrets_are(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(example()))
    assert harness.converge(objects).converged
    prefix = harness.store.get(AWSMachine, MACHINE, "default").spec.cloud_init

    harness.apply(example())  # the manifest names no cloudInit: what the controller wrote stays

    assert harness.store.get(AWSMachine, MACHINE, "default").spec.cloud_init == prefix


def test_a_template_cannot_name_one_machines_secrets() -> None:
    template = AWSMachineTemplate.model_validate(
        {
            "metadata": {"name": "workers", "namespace": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "instanceType": "t3.medium",
                        "cloudInit": {"secretPrefix": "aws.cluster.x-k8s.io/one", "secretCount": 1},
                    }
                }
            },
        }
    )
    paths = sorted(i.path for i in template.semantic_issues())
    assert paths == ["spec.template.spec.cloudInit.secretCount", "spec.template.spec.cloudInit.secretPrefix"]


@BACKENDS
def test_a_moved_machine_that_keeps_its_instance_id_stores_no_chunks_again(
    harness: Harness, example: Callable[[], list[KubeObject]], backend: Backend
) -> None:
    objects = example()
    if backend.cloud_init is not None:
        _control_plane(objects).spec.cloud_init = backend.cloud_init.model_copy()
    objects = _targets(harness.apply(objects))
    assert harness.converge(objects).converged
    machine = harness.store.get(AWSMachine, MACHINE, "default")
    instance_id = machine.status.instance_id
    assert machine.spec.instance_id == instance_id

    # clusterctl move: the spec (instanceID, cloudInit) travels, the status does not.
    machine.status = AWSMachineStatus()
    harness.store.update_status(machine)
    with created_chunks(backend) as created, call_scope() as calls:
        harness.pool = harness.new_pool()
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"
    assert created == [], "no chunk stored again for a machine that has an instance"
    assert f"{backend.service}:{backend.create_operation}" not in calls.by_operation()
    assert harness.store.get(AWSMachine, MACHINE, "default").status.instance_id == instance_id


# -- crash points and faults --------------------------------------------------------------------------


def _cluster_first(harness: Harness, example: Callable[[], list[KubeObject]]) -> ObjectKey:
    """The cluster converged while the control-plane machine has no bootstrap data yet (and no workers),
    then its data given: the next reconcile of its AWSMachine is the one that stores and launches."""
    objects = [o for o in example() if not isinstance(o, MachineDeployment)]
    for obj in objects:
        if isinstance(obj, Machine):
            obj.spec.bootstrap.data_secret_name = None
    applied = harness.apply(objects)
    awscluster = next(o for o in applied if isinstance(o, AWSCluster))
    assert harness.converge([awscluster]).converged
    machine = harness.store.get(Machine, MACHINE, "default")
    machine.spec.bootstrap.data_secret_name = "demo-bootstrap"
    harness.store.update(machine)
    return ObjectKey("AWSMachine", "default", MACHINE)


def _first_on(harness: Harness, example: Callable[[], list[KubeObject]], backend: Backend) -> ObjectKey:
    """:func:`_cluster_first`, the control-plane machine on ``backend``."""
    key = _cluster_first(harness, example)
    if backend.cloud_init is not None:
        machine = harness.store.get(AWSMachine, MACHINE, "default")
        machine.spec.cloud_init = backend.cloud_init.model_copy()
        harness.store.update(machine)
    return key


def _reconcile_with(harness: Harness, key: ObjectKey) -> None:
    AWSMachineController(harness.store, harness.new_pool(), harness.engine).reconcile(key)


def _instances(harness: Harness) -> list[str]:
    reservations = harness.aws.ec2.call(
        "DescribeInstances", Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def _machine_targets(harness: Harness) -> list[KubeObject]:
    return [harness.store.get(AWSMachine, MACHINE, "default")]


@BACKENDS
def test_a_crash_after_the_create_reuses_the_chunk_and_leaves_no_orphan(
    harness: Harness, example: Callable[[], list[KubeObject]], backend: Backend
) -> None:
    key = _first_on(harness, example, backend)
    with crash_after(backend.create_operation):
        crashing(lambda: _reconcile_with(harness, key))
    left = backend.listed(harness)
    assert len(left) == 1, left
    resources = harness.store.get(AWSMachine, MACHINE, "default").status.resources
    assert not resources.get(f"{backend.role_prefix}-{MACHINE}-0")
    assert _instances(harness) == []

    operation = (backend.service, backend.create_operation)
    with created_chunks(backend) as created, refused_creates(*operation) as refused:
        harness.pool = harness.new_pool()
        result = harness.converge(_machine_targets(harness))
    assert result.converged, f"not converged: {result.states}"
    if backend is SECRETS:
        # CreateSecret refuses a taken name and makes nothing: the engine creates first and looks the
        # name up only on that refusal, then adopts the secret it finds carrying this role's tags.
        assert len(created) == 1, created
        assert refused == ["ResourceExistsException"], "the one create was refused: the name is taken"
    else:
        assert created == [], "the chunk the crashed pass made is found (tags, then name) and reused"
    assert backend.listed(harness) == [], "the adopted chunk is deleted once the instance runs"
    assert len(_instances(harness)) == 1


def test_a_crash_after_run_instances_deletes_the_secrets_on_the_next_pass(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    key = _cluster_first(harness, example)
    with crash_after("RunInstances"):
        crashing(lambda: _reconcile_with(harness, key))
    assert len(_secrets(harness)) == 1
    assert len(_instances(harness)) == 1

    with created_secrets() as created:
        harness.pool = harness.new_pool()
        result = harness.converge(_machine_targets(harness))
    assert result.converged, f"not converged: {result.states}"
    assert created == []
    assert _secrets(harness) == [], "the secrets recorded before the crash are deleted"
    assert len(_instances(harness)) == 1, "the instance the crashed pass launched is adopted"


def test_a_throttled_create_secret_is_retried(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    key = _cluster_first(harness, example)
    faults = Faults(fail_rules=[FailRule("CreateSecret", "ThrottlingException", remaining=2)])
    unregister = register_client_hook(faults.client_hook)
    try:
        with call_scope() as calls:
            _reconcile_with(harness, key)
    finally:
        unregister()
    machine = harness.store.get(AWSMachine, MACHINE, "default")
    assert machine.status.failure_reason is None, machine.status.failure_message
    assert machine.status.resources[f"bootstrap-secret-{MACHINE}-0"].kind == "secret"
    assert machine.status.instance_id
    outcomes = {k.outcome: n for k, n in calls.snapshot().items() if k.operation == "CreateSecret"}
    assert outcomes == {"ThrottlingException": 2, "ok": 1}


@BACKENDS
def test_deleting_a_machine_whose_instance_never_launched_deletes_its_chunks(
    harness: Harness, example: Callable[[], list[KubeObject]], backend: Backend
) -> None:
    key = _first_on(harness, example, backend)
    faults = Faults(fail_rules=[FailRule("RunInstances", "Unsupported")])
    unregister = register_client_hook(faults.client_hook)
    try:
        _reconcile_with(harness, key)
    finally:
        unregister()
    machine = harness.store.get(AWSMachine, MACHINE, "default")
    assert machine.status.failure_reason == "Unsupported"
    assert len(backend.listed(harness)) == 1, "stored before the launch that AWS refused"

    harness.store.delete(AWSMachine, MACHINE, "default")
    result = harness.converge([machine], goal="gone")
    assert result.converged, f"not deleted: {result.states}"
    assert backend.listed(harness) == []


@BACKENDS
@pytest.mark.parametrize("size", ["empty", "one byte", "three chunks"])
def test_chunks_rebuild_the_data_and_fit_the_backend(size: str, backend: Backend) -> None:
    from controllers.services.bootstrap import chunks

    data = os.urandom({"empty": 0, "one byte": 1, "three chunks": backend.chunk_size * 3}[size])
    parts = chunks(data, backend.chunk_size)
    assert parts == chunks(data, backend.chunk_size), "the same data always gives the same chunks"
    assert all(0 < len(p) <= backend.chunk_size for p in parts)
    assert gzip.decompress(b"".join(parts)) == data
    if backend is PARAMETERS:
        assert all(len(base64.b64encode(p)) <= 4096 for p in parts), "within the standard tier"


def test_a_machine_never_adopts_the_secret_of_another_machine_of_its_cluster(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """Lookups by tags match the cluster and role tags only: a secret another machine of the cluster stored
    (same cluster tag, its own role) is not this machine's, whatever its index."""
    objects = _targets(harness.apply(_with_bootstrap(example(), BIG)))
    other = "aws.cluster.x-k8s.io/another-machine-0"
    for role in ("bootstrap-secret-0", "bootstrap-secret-demo-worker-0"):
        harness.aws.client("secretsmanager").call(
            "CreateSecret",
            Name=f"{other}-{role}",
            SecretBinary=b"\x1f\x8b another machine's data",
            Tags=[
                {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/demo", "Value": "owned"},
                {"Key": "capa-py.io/role", "Value": role},
            ],
        )
    with created_secrets() as created:
        harness.pool = harness.new_pool()
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    machine = harness.store.get(AWSMachine, MACHINE, "default")
    prefix = f"aws.cluster.x-k8s.io/{machine.uid}"
    mine = [p["Name"] for p in created if p["Name"].startswith(prefix)]
    expected = -(-len(gzip.compress(BIG.encode(), mtime=0)) // CHUNK_SIZE)
    assert sorted(mine) == [f"{prefix}-{n}" for n in range(expected)], "each of its chunks is its own secret"
    left = sorted(s["Name"] for s in _secrets(harness))
    assert left == sorted(f"{other}-{r}" for r in ("bootstrap-secret-0", "bootstrap-secret-demo-worker-0"))
