"""The bootstrap data service: a machine's bootstrap data in AWS Secrets Manager, not in its user data.

An instance's user data can be read by anyone allowed ``ec2:DescribeInstanceAttribute`` and holds at most
16 KB; the bootstrap data carries the cluster's join token and certificates. As Cluster API Provider AWS does
by default, :func:`store_bootstrap_data` gzips it, splits it into chunks of :data:`CHUNK_SIZE` bytes and
stores each as a secret ``<prefix>-<n>`` (``prefix``: ``spec.cloudInit.secretPrefix``, else
``aws.cluster.x-k8s.io/<the AWSMachine's uid>``), through the engine (tags on create, a client request token,
the name as natural key, each recorded in status the moment it is created), before ``RunInstances``; the
instance's user data is then :func:`fetch_script`, which reads the secrets with the instance role's
permission, deletes them, and runs the data. ``spec.cloudInit.secretPrefix`` and ``secretCount`` are written
with the instance id, so a machine moved to another management cluster (its status lost) still names them.

:func:`delete_bootstrap_data` deletes the secrets once the instance is running, and when the machine is
deleted; ``secretCount`` is cleared then. A machine that already has an instance (recorded, or
``spec.instanceID`` kept across a move) never stores its data again. ``insecureSkipSecretsManager`` puts the
data in the user data as it is. Nothing of the contents is logged, recorded or put in an event: the secrets'
fingerprints are their names.

With ``spec.cloudInit.secureSecretsBackend: ssm-parameter-store`` the chunks go to SSM Parameter Store
instead, as Cluster API Provider AWS stores them: ``SecureString`` parameters ``<prefix>/<n>`` (``prefix``:
``spec.cloudInit.secretPrefix``, else ``/cluster.x-k8s.io/<the AWSMachine's uid>``), each chunk of
:data:`PARAMETER_CHUNK_SIZE` gzipped bytes base64-encoded to fit the standard tier's 4 KB; the script reads
them with ``aws ssm get-parameter --with-decryption`` and deletes them. Everything else (when they are made,
deleted, never made again) is the same.
"""

from __future__ import annotations

import base64
import gzip
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capa_py.api.aws import AWSMachine
from capa_py.api.aws_machine import SSM_PARAMETER_STORE
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import ResourceClass
from controllers.aws_scope import ReconcileScope
from controllers.services.ignition import IGNITION_FORMAT, store_ignition_data
from controllers.services.instances import MachineScope, instance_role
from resources.parameter import NAME_PREFIX as PARAMETER_PREFIX
from resources.parameter import Parameter, ParameterDesired
from resources.secret import NAME_PREFIX, Secret, SecretDesired

NODE_IAM_ACTIONS: tuple[str, ...] = (
    "secretsmanager:DeleteSecret",
    "secretsmanager:GetSecretValue",
    "ssm:DeleteParameter",
    "ssm:GetParameter",
)
"""What the nodes' instance role needs on ``arn:aws:secretsmanager:*:*:secret:aws.cluster.x-k8s.io/*``
for :func:`fetch_script`, and on ``arn:aws:ssm:*:*:parameter/cluster.x-k8s.io/*`` for
:func:`parameter_fetch_script` (``capa iam policy --for nodes``; see docs/bootstrap-data.md)."""

CHUNK_SIZE = 7000
"""Bytes of gzipped data per secret: Cluster API Provider AWS's figure, well under Secrets Manager's limit
once the SDK has base64-encoded the binary value."""

PARAMETER_CHUNK_SIZE = 3000
"""Bytes of gzipped data per parameter: 4000 characters once base64-encoded, within the standard tier's
4096 (Cluster API Provider AWS stores 4000 per parameter too)."""

SECRET_ROLE = "bootstrap-secret"
PARAMETER_ROLE = "bootstrap-parameter"


def uses_parameter_store(machine: AWSMachine) -> bool:
    cloud_init = machine.spec.cloud_init
    return cloud_init is not None and cloud_init.secure_secrets_backend == SSM_PARAMETER_STORE


def secret_prefix(machine: AWSMachine) -> str:
    cloud_init = machine.spec.cloud_init
    if cloud_init is not None and cloud_init.secret_prefix:
        return cloud_init.secret_prefix
    return f"{backend_of(machine).default_prefix}{machine.uid}"


def secret_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index}"


def parameter_name(prefix: str, index: int) -> str:
    return f"{prefix}/{index}"


def chunks(data: bytes, size: int = CHUNK_SIZE) -> list[bytes]:
    """The gzipped data in ``size`` pieces. ``mtime=0``: the same data always gives the same chunks, so a
    pass after a crash stores what the interrupted one did."""
    packed = gzip.compress(data, mtime=0)
    return [packed[start : start + size] for start in range(0, len(packed), size)]


def skips_secrets_manager(machine: AWSMachine) -> bool:
    cloud_init = machine.spec.cloud_init
    return cloud_init is not None and cloud_init.insecure_skip_secrets_manager


def has_instance(scope: MachineScope) -> bool:
    """Whether the machine has (had) an instance: recorded, or named in its spec or status (kept across a
    move that lost the status)."""
    obj = scope.obj
    recorded = scope.recorder.recorded(instance_role(obj.name))
    return recorded is not None or bool(obj.spec.instance_id) or bool(obj.status.instance_id)


def _run_lines() -> list[str]:
    return [
        'for ((i = 0; i < count; i++)); do cat "$work/part-$i"; done | gunzip > "$work/bootstrap"',
        'if [ "$(head -c 2 "$work/bootstrap")" = "#!" ]; then',
        '  chmod 0700 "$work/bootstrap"',
        '  "$work/bootstrap"',
        "else",
        '  cloud-init --file "$work/bootstrap" init',
        '  cloud-init --file "$work/bootstrap" modules --mode=config',
        '  cloud-init --file "$work/bootstrap" modules --mode=final',
        "fi",
    ]


def parameter_fetch_script(prefix: str, count: int, region: str) -> bytes:
    """The user data of an instance whose bootstrap data is in Parameter Store: read the ``count``
    parameters decrypted (retrying while the instance role's credentials arrive), delete them, unpack the
    data and run it. Names and the region only, never the contents."""
    lines = [
        "#!/bin/bash",
        "# capa-py: this machine's bootstrap data is in AWS SSM Parameter Store, not in its user data.",
        "# Read with the instance role's permission, deleted once read, then run.",
        "set -o errexit -o nounset -o pipefail",
        "umask 077",
        f"region={shlex.quote(region)}",
        f"prefix={shlex.quote(prefix)}",
        f"count={count}",
        'work="$(mktemp -d)"',
        "trap 'rm -rf \"$work\"' EXIT",
        "for ((i = 0; i < count; i++)); do",
        "  for attempt in $(seq 1 30); do",
        '    if aws ssm get-parameter --region "$region" --name "$prefix/$i" --with-decryption \\',
        '        --query Parameter.Value --output text | base64 -d > "$work/part-$i"; then break; fi',
        '    if [ "$attempt" -eq 30 ]; then echo "cannot read parameter $prefix/$i" >&2; exit 1; fi',
        "    sleep 5",
        "  done",
        "done",
        "for ((i = 0; i < count; i++)); do",
        '  aws ssm delete-parameter --region "$region" --name "$prefix/$i" > /dev/null || true',
        "done",
        *_run_lines(),
    ]
    return ("\n".join(lines) + "\n").encode()


def fetch_script(prefix: str, count: int, region: str) -> bytes:
    """The user data of an instance whose bootstrap data is in Secrets Manager: fetch the ``count`` secrets
    (retrying while the instance role's credentials arrive), delete them, unpack the data and run it (a
    script, or cloud-config handed to cloud-init). Names and the region only, never the contents."""
    lines = [
        "#!/bin/bash",
        "# capa-py: this machine's bootstrap data is in AWS Secrets Manager, not in its user data.",
        "# Read with the instance role's permission, deleted once read, then run.",
        "set -o errexit -o nounset -o pipefail",
        "umask 077",
        f"region={shlex.quote(region)}",
        f"prefix={shlex.quote(prefix)}",
        f"count={count}",
        'work="$(mktemp -d)"',
        "trap 'rm -rf \"$work\"' EXIT",
        "for ((i = 0; i < count; i++)); do",
        "  for attempt in $(seq 1 30); do",
        '    if aws secretsmanager get-secret-value --region "$region" --secret-id "$prefix-$i" \\',
        '        --query SecretBinary --output text | base64 -d > "$work/part-$i"; then break; fi',
        '    if [ "$attempt" -eq 30 ]; then echo "cannot read secret $prefix-$i" >&2; exit 1; fi',
        "    sleep 5",
        "  done",
        "done",
        "for ((i = 0; i < count; i++)); do",
        '  aws secretsmanager delete-secret --region "$region" --secret-id "$prefix-$i" \\',
        "    --force-delete-without-recovery > /dev/null || true",
        "done",
        *_run_lines(),
    ]
    return ("\n".join(lines) + "\n").encode()


def _secret_desired(name: str, part: bytes | None, description: str) -> SecretDesired:
    return SecretDesired(name) if part is None else SecretDesired(name, part, description)


def _parameter_desired(name: str, part: bytes | None, description: str) -> ParameterDesired:
    if part is None:
        return ParameterDesired(name)
    return ParameterDesired(name, base64.b64encode(part).decode(), description)


@dataclass(frozen=True)
class Backend:
    """Where a machine's chunks go, and everything that differs between the stores: the resource class,
    the engine role of a chunk, the chunk size, a chunk's name, its desired state (``part`` None: only the
    name, to delete it) and the user data that fetches them. The store and delete flows are the same."""

    resource: Callable[[AWSClients], ResourceClass[Any]]
    kind: str
    role_prefix: str
    chunk_size: int
    default_prefix: str
    name: Callable[[str, int], str]
    desired: Callable[[str, bytes | None, str], Any]
    fetch_script: Callable[[str, int, str], bytes]

    def role(self, machine_name: str, index: int) -> str:
        """The engine role of a machine's ``index``-th chunk. It names the machine: lookups by tags match
        the cluster and role tags only, and every machine of a cluster stores chunks 0, 1, …: with the
        index alone, a machine whose create was interrupted would adopt another machine's chunk."""
        return f"{self.role_prefix}-{machine_name}-{index}"


SECRETS_MANAGER = Backend(
    resource=Secret,
    kind=Secret.kind,
    role_prefix=SECRET_ROLE,
    chunk_size=CHUNK_SIZE,
    default_prefix=NAME_PREFIX,
    name=secret_name,
    desired=_secret_desired,
    fetch_script=fetch_script,
)
PARAMETER_STORE = Backend(
    resource=Parameter,
    kind=Parameter.kind,
    role_prefix=PARAMETER_ROLE,
    chunk_size=PARAMETER_CHUNK_SIZE,
    default_prefix=PARAMETER_PREFIX,
    name=parameter_name,
    desired=_parameter_desired,
    fetch_script=parameter_fetch_script,
)
BACKENDS: dict[str, Backend] = {"secrets-manager": SECRETS_MANAGER, SSM_PARAMETER_STORE: PARAMETER_STORE}
"""``spec.cloudInit.secureSecretsBackend`` → its backend (unset: Secrets Manager)."""


def backend_of(machine: AWSMachine) -> Backend:
    return PARAMETER_STORE if uses_parameter_store(machine) else SECRETS_MANAGER


def store_bootstrap_data(scope: MachineScope) -> None:
    """Decide the instance's user data: the fetch script over freshly stored chunks, the data itself
    (``insecureSkipSecretsManager``), or — for a machine that has an instance already — no new chunks.
    Ignition data goes its own way (:func:`controllers.services.ignition.store_ignition_data`)."""
    obj = scope.obj
    if scope.bootstrap_format == IGNITION_FORMAT:
        store_ignition_data(scope)
        return
    if skips_secrets_manager(obj):
        scope.user_data = scope.bootstrap
        return
    backend = backend_of(obj)
    prefix = secret_prefix(obj)
    region = scope.aws.region
    if has_instance(scope):
        cloud_init = obj.spec.cloud_init
        count = (cloud_init.secret_count or 0) if cloud_init else 0
        scope.user_data = backend.fetch_script(prefix, count, region)
        return
    resource = backend.resource(scope.aws)
    parts = chunks(scope.bootstrap, backend.chunk_size)
    description = f"Bootstrap data of AWSMachine {obj.namespace}/{obj.name}, deleted once it has booted"
    for index, part in enumerate(parts):
        scope.engine.ensure(
            resource,
            backend.role(obj.name, index),
            backend.desired(backend.name(prefix, index), part, description),
            scope.engine_scope,
            name=obj.name,
        )
    scope.cloud_init = (prefix, len(parts))
    scope.user_data = backend.fetch_script(prefix, len(parts), region)


def _recorded_indices(obj: AWSMachine, backend: Backend) -> set[int]:
    found: set[int] = set()
    for role, resource in obj.status.resources.items():
        index = role.removeprefix(f"{backend.role_prefix}-{obj.name}-")
        if resource.kind == backend.kind and index != role and index.isdigit():
            found.add(int(index))
    return found


def delete_bootstrap_data(scope: ReconcileScope[AWSMachine]) -> None:
    """Delete the machine's chunks: those its status records and those ``spec.cloudInit.secretCount``
    names (a machine whose status was lost in a move); then clear ``secretCount``. Nothing to do, and no
    call made, when neither names any."""
    obj = scope.obj
    cloud_init = obj.spec.cloud_init
    count = (cloud_init.secret_count or 0) if cloud_init is not None else 0
    backend = backend_of(obj)
    indices = _recorded_indices(obj, backend) | set(range(count))
    if not indices:
        return
    prefix = secret_prefix(obj)
    resource = backend.resource(scope.aws)
    for index in sorted(indices):
        desired = backend.desired(backend.name(prefix, index), None, "")
        scope.engine.remove(resource, backend.role(obj.name, index), scope.engine_scope, desired)
    if count and not obj.being_deleted:

        def cleared(o: AWSMachine) -> None:
            if o.spec.cloud_init is not None:
                o.spec.cloud_init.secret_count = None

        scope.update_spec(cleared)


__all__ = [
    "BACKENDS",
    "CHUNK_SIZE",
    "PARAMETER_STORE",
    "SECRETS_MANAGER",
    "Backend",
    "backend_of",
    "PARAMETER_CHUNK_SIZE",
    "NODE_IAM_ACTIONS",
    "chunks",
    "delete_bootstrap_data",
    "fetch_script",
    "parameter_fetch_script",
    "parameter_name",
    "secret_name",
    "secret_prefix",
    "store_bootstrap_data",
]
