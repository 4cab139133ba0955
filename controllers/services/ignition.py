"""A machine's Ignition bootstrap data: in the cluster's S3 bucket, the user data a config pointing at it.

When the bootstrap Secret's ``format`` key is ``ignition`` (Flatcar, Fedora CoreOS) the data is an Ignition
config, which cloud-init's fetch script cannot run. As Cluster API Provider AWS does, with
``spec.ignition.storageType: ClusterObjectStore`` (the default) :func:`store_ignition_data` uploads it to the
cluster's ``spec.s3Bucket`` as ``control-plane/<AWSMachine name>`` or ``node/<AWSMachine name>``
(``PutObject``, server-side encrypted) and the instance's user data becomes an Ignition config of
``spec.ignition.version`` whose ``ignition.config.replace`` source is ``s3://<bucket>/<key>``: Ignition
fetches it with the instance role's credentials, which the bucket policy lets read that prefix
(:mod:`controllers.services.objectstore`). ``UnencryptedUserData`` puts the data in the user data as it is.

The upload's strategy: the object's key is a natural key chosen by capa-py (the bucket from the cluster's
spec, the key from the machine's role and name), and ``PutObject`` replaces whatever is at a key. So a
repeated upload — after a crash, a lost response, a retried transient error — writes the same bytes to the
same object: no second object can exist, and nothing need be found again or recorded. That is class 5 made
safe by a key, with no token needed (``PutObject`` has none) and no tags (the object belongs to the
bucket, which carries the cluster's tags and is emptied with it). The upload happens on every pass until
the instance exists, never after.

The object is deleted (:func:`delete_when_joined`, :func:`delete_ignition_data`) as CAPA deletes it: once
the Machine has a node (``status.nodeRef``: the node booted and joined), and when the machine is deleted —
not merely once the instance runs, because Ignition reads it during the first boot. A missing key or
bucket is nothing to delete; with ``spec.s3Bucket.bestEffortDeleteObjects`` an AccessDenied is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_machine import CLUSTER_OBJECT_STORE, DEFAULT_IGNITION_VERSION
from capa_py.api.cluster import Machine
from capa_py.api.conditions import set_condition
from capa_py.api.core import Secret
from capa_py.aws.errors import AWSError, NotFound
from capa_py.aws.session import AWSClients
from capa_py.logging import get_logger
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from controllers.aws_scope import ReconcileScope
from controllers.services.instances import MachineScope, instance_role
from controllers.services.objectstore import CONTROL_PLANE_PREFIX, NODE_PREFIX

IAM_ACTIONS: tuple[str, ...] = ("s3:DeleteObject", "s3:PutObject")

NODE_IAM_ACTIONS: tuple[str, ...] = ("s3:GetObject",)
"""What a machine's role needs to read its Ignition data (``capa iam policy --for nodes``; the bucket policy
grants it too, to the named instance profiles' roles)."""

IGNITION_DATA_DELETED = "IgnitionDataDeleted"
"""True once the machine's Ignition data was deleted because its node joined."""
FORMAT_KEY = "format"
"""The bootstrap Secret's key naming the data's format (Cluster API's bootstrap contract)."""
IGNITION_FORMAT = "ignition"
SERVER_SIDE_ENCRYPTION = "AES256"
_log = get_logger("controller.ignition")


def bootstrap_format(secret: Secret) -> str:
    """``cloud-config`` (the default) or ``ignition``."""
    try:
        return secret.value(FORMAT_KEY).decode().strip() or "cloud-config"
    except KeyError:
        return "cloud-config"


def stores_in_bucket(obj: AWSMachine, data_format: str) -> bool:
    """Whether this machine's data goes to the cluster's bucket: Ignition data, ``ClusterObjectStore``."""
    if data_format != IGNITION_FORMAT:
        return False
    ignition = obj.spec.ignition
    return ignition is None or ignition.storage_type == CLUSTER_OBJECT_STORE


def missing_bucket(obj: AWSMachine, awscluster: AWSCluster, data_format: str) -> str | None:
    """Why this machine cannot be built (nothing is, then): Ignition data for a cluster with no bucket."""
    if stores_in_bucket(obj, data_format) and awscluster.spec.s3_bucket is None:
        return (
            f"spec.s3Bucket: AWSCluster {awscluster.name} names no bucket, and machine {obj.name}'s "
            "bootstrap data is Ignition stored in the cluster's object store (spec.ignition.storageType "
            "ClusterObjectStore); set the cluster's spec.s3Bucket or the machine's storageType "
            "UnencryptedUserData"
        )
    return None


def object_key(machine_name: str, control_plane: bool) -> str:
    return f"{CONTROL_PLANE_PREFIX if control_plane else NODE_PREFIX}{machine_name}"


def pointer_config(version: str, bucket: str, key: str) -> bytes:
    """The user data: an Ignition config of ``version`` (``2.3`` is written ``2.3.0``) replaced by the one at
    ``s3://<bucket>/<key>``. Ignition 2.x and 3.x spell ``config.replace`` the same way."""
    config = {
        "ignition": {
            "version": f"{version}.0",
            "config": {"replace": {"source": f"s3://{bucket}/{key}"}},
        }
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def has_instance(scope: MachineScope) -> bool:
    obj = scope.obj
    return (
        scope.recorder.recorded(instance_role(obj.name)) is not None
        or bool(obj.spec.instance_id)
        or bool(obj.status.instance_id)
    )


def store_ignition_data(scope: MachineScope) -> None:
    """Decide the user data of a machine whose data is Ignition: the data itself
    (``UnencryptedUserData``), or the pointer config over the data uploaded to the cluster's bucket."""
    obj = scope.obj
    if not stores_in_bucket(obj, IGNITION_FORMAT):
        scope.user_data = scope.bootstrap
        return
    bucket = scope.awscluster.spec.s3_bucket
    if bucket is None:  # refused by the controller before the pass: kept for the type checker
        raise ValueError(missing_bucket(obj, scope.awscluster, IGNITION_FORMAT))
    key = object_key(obj.name, scope.machine.is_control_plane)
    version = obj.spec.ignition.version if obj.spec.ignition is not None else DEFAULT_IGNITION_VERSION
    if not has_instance(scope):
        scope.aws.client("s3").call(
            "PutObject",
            Bucket=bucket.name,
            Key=key,
            Body=scope.bootstrap,
            ServerSideEncryption=SERVER_SIDE_ENCRYPTION,
        )
        _log.info("ignition data stored", machine=obj.name, bucket=bucket.name, key=key)
    scope.user_data = pointer_config(version, bucket.name, key)


@dataclass(frozen=True)
class IgnitionObjects:
    """Where a machine's Ignition data may be: the bucket and the key (both keys when the Machine, which
    says the role, is gone)."""

    bucket: str
    keys: tuple[str, ...]
    best_effort: bool = False


def delete_objects(aws: AWSClients, objects: IgnitionObjects) -> None:
    s3 = aws.client("s3")
    for key in objects.keys:
        try:
            s3.call("DeleteObject", Bucket=objects.bucket, Key=key)
        except NotFound:  # NoSuchBucket: the cluster's delete emptied and removed it
            return
        except AWSError as exc:
            if objects.best_effort and getattr(exc, "code", "") in ("AccessDenied", "Forbidden"):
                _log.info("ignition data not deleted (best effort)", bucket=objects.bucket, key=key)
                continue
            raise
        _log.info("ignition data deleted", bucket=objects.bucket, key=key)


def objects_of(
    store: ObjectStore, obj: AWSMachine, machine: Machine | None, awscluster: object
) -> IgnitionObjects | None:
    """The objects a deleted machine may have left: none unless its cluster names a bucket and its data is
    (or, with the bootstrap Secret gone, may have been) Ignition in that bucket."""
    if not isinstance(awscluster, AWSCluster) or awscluster.spec.s3_bucket is None:
        return None
    data_format: str | None = None
    secret_name = machine.spec.bootstrap.data_secret_name if machine is not None else None
    if secret_name:
        secret = get_or_none(store, Secret, secret_name, obj.namespace)
        if secret is not None:
            data_format = bootstrap_format(secret)
    if not stores_in_bucket(obj, data_format or IGNITION_FORMAT):
        return None
    if machine is not None:
        keys: tuple[str, ...] = (object_key(obj.name, machine.is_control_plane),)
    else:
        keys = (object_key(obj.name, True), object_key(obj.name, False))
    bucket = awscluster.spec.s3_bucket
    return IgnitionObjects(bucket.name, keys, bool(bucket.best_effort_delete_objects))


@dataclass(kw_only=True)
class MachineDeleteScope(ReconcileScope[AWSMachine]):
    """The delete pass's scope, with where the machine's Ignition data may be."""

    ignition: IgnitionObjects | None = None


def delete_ignition_data(scope: MachineDeleteScope) -> None:
    if scope.ignition is not None:
        delete_objects(scope.aws, scope.ignition)


def delete_when_joined(scope: MachineScope) -> None:
    """In the create pass: the data is deleted once the Machine has a node (CAPA's moment), once:
    :data:`IGNITION_DATA_DELETED` then says so, and later passes make no call."""
    obj = scope.obj
    if not stores_in_bucket(obj, scope.bootstrap_format) or scope.machine.status.node_ref is None:
        return
    bucket = scope.awscluster.spec.s3_bucket
    if bucket is None or any(c.type == IGNITION_DATA_DELETED for c in obj.status.conditions):
        return
    key = object_key(obj.name, scope.machine.is_control_plane)
    delete_objects(scope.aws, IgnitionObjects(bucket.name, (key,), bool(bucket.best_effort_delete_objects)))

    def deleted(o: AWSMachine) -> None:
        message = f"s3://{bucket.name}/{key} deleted"
        set_condition(o.status, IGNITION_DATA_DELETED, True, "NodeJoined", message)

    scope.change_status(deleted)


__all__ = [
    "FORMAT_KEY",
    "IGNITION_DATA_DELETED",
    "IAM_ACTIONS",
    "IGNITION_FORMAT",
    "NODE_IAM_ACTIONS",
    "IgnitionObjects",
    "MachineDeleteScope",
    "bootstrap_format",
    "delete_ignition_data",
    "delete_when_joined",
    "missing_bucket",
    "object_key",
    "objects_of",
    "pointer_config",
    "store_ignition_data",
]
