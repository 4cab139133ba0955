"""What a wait for objects can be blocked on: the one list of reasons that cannot change by themselves.

``capa apply`` and ``capa delete --wait`` run the controllers until their targets are ready (or gone). Some
states can never get there without someone doing something, so waiting out the timeout only hides why:

* ``Deleted`` / ``BeingDeleted`` — a target of an apply was deleted (or marked for deletion) by another
  process while the apply waited for it to become ready;
* ``EndpointUnreachable`` — an object's last reconciles in a row all failed to connect to the AWS endpoint
  (each after the AWS client's own retries);
* ``ClusterNotFound`` — a Machine names a Cluster that does not exist (the core controller's condition);
* ``HardwareNotFound`` / ``TemplateNotFound`` — a Workflow names one that does not exist (the workflow
  controller's condition);
* ``NoHardwareAvailable`` — no free Hardware matches a TinkerbellMachine (its controller's condition);
* ``<Kind>NotFound`` — an object waits on another that does not exist and that nothing being applied
  creates (a Cluster's infrastructure, an AWSMachine's Cluster).

An object that waits on a blocked one is blocked too, with that object's reason. :func:`find_blocked` gives,
for each target, what blocks it; a wait ends early when every target not yet done is blocked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from capa_py.api.cluster import CLUSTER_NAME_LABEL
from capa_py.api.meta import KubeObject, ObjectReference
from capa_py.api.registry import REGISTRY, UnknownKind
from capa_py.aws.errors import AWSError
from capa_py.runtime.manager import Manager, key_of
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore

DELETED = "Deleted"
BEING_DELETED = "BeingDeleted"
ENDPOINT_UNREACHABLE = "EndpointUnreachable"
CLUSTER_NOT_FOUND = "ClusterNotFound"

CONDITION_REASONS = frozenset(
    {CLUSTER_NOT_FOUND, "HardwareNotFound", "TemplateNotFound", "NoHardwareAvailable"}
)
"""Ready-condition reasons controllers set for a state only a user can change."""
CONNECTION_ERRORS = frozenset({"EndpointConnectionError", "ConnectTimeoutError"})
"""Error codes (:class:`~capa_py.aws.errors.AWSError` ``code``) of an endpoint that does not answer."""
ENDPOINT_FAILURES_TO_BLOCK = 2
"""Reconciles in a row that must fail to connect before the endpoint counts as gone (each one already
retried every call several times with backoff)."""

Goal = Literal["ready", "gone"]


@dataclass(frozen=True)
class Blocked:
    """Why an object cannot reach the goal by itself."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def label(obj: KubeObject | ObjectKey) -> str:
    """``kind/name``, as the CLI prints objects."""
    if isinstance(obj, ObjectKey):
        return f"{obj.kind.lower()}/{obj.name}"
    return f"{obj.KIND.lower()}/{obj.name}"


def _endpoint_block(manager: Manager, key: ObjectKey) -> Blocked | None:
    count, error = manager.error_streaks.get(key, (0, None))
    if count < ENDPOINT_FAILURES_TO_BLOCK or not isinstance(error, AWSError):
        return None
    if error.code not in CONNECTION_ERRORS:
        return None
    return Blocked(ENDPOINT_UNREACHABLE, f"{count} reconciles in a row could not reach AWS: {error}")


def _condition_block(obj: KubeObject) -> Blocked | None:
    status: Any = getattr(obj, "status", None)
    for condition in getattr(status, "conditions", None) or []:
        if condition.type == "Ready" and condition.status != "True" and condition.reason in CONDITION_REASONS:
            return Blocked(condition.reason, condition.message or condition.reason)
    return None


def _ref_key(ref: ObjectReference | None, namespace: str) -> tuple[type[KubeObject], ObjectKey] | None:
    if ref is None or not ref.kind or not ref.name or not ref.api_version:
        return None
    try:
        kind = REGISTRY.for_gvk(ref.api_version, ref.kind)
    except UnknownKind:
        return None
    return kind, ObjectKey(ref.kind, ref.namespace or namespace, ref.name)


class _Graph:
    """What each object waits on, for the goal, read from the store once per check."""

    def __init__(self, store: ObjectStore, goal: Goal) -> None:
        self.store = store
        self.goal = goal
        self._objects: dict[ObjectKey, KubeObject | None] = {}
        self._remembered: set[ObjectKey] = set()

    def get(self, kind: type[KubeObject], key: ObjectKey) -> KubeObject | None:
        if key not in self._objects:
            try:
                self._objects[key] = self.store.get(kind, key.name, key.namespace or None)
            except NotFound:
                self._objects[key] = None
        return self._objects[key]

    def remember(self, key: ObjectKey, obj: KubeObject | None) -> None:
        """Take ``obj`` as ``key``'s copy instead of reading it."""
        self._objects[key] = obj
        self._remembered.add(key)

    def forget(self, key: ObjectKey) -> bool:
        """Drop a remembered copy so that the next :meth:`get` reads the store; whether there was one."""
        if key not in self._remembered:
            return False
        self._remembered.discard(key)
        self._objects.pop(key, None)
        return True

    def waits_on(self, obj: KubeObject) -> list[tuple[type[KubeObject], ObjectKey]]:
        from capa_py.api.aws import AWSCluster, AWSMachine
        from capa_py.api.cluster import Cluster, Machine

        namespace = obj.metadata.namespace or ""
        found: list[tuple[type[KubeObject], ObjectKey] | None] = []
        if self.goal == "ready":
            if isinstance(obj, Cluster):
                found.append(_ref_key(obj.spec.infrastructure_ref, namespace))
            elif isinstance(obj, Machine):
                found.append((Cluster, ObjectKey("Cluster", namespace, obj.spec.cluster_name)))
                found.append(_ref_key(obj.spec.infrastructure_ref, namespace))
            elif isinstance(obj, AWSMachine):
                cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
                if cluster:
                    found.append((Cluster, ObjectKey("Cluster", namespace, cluster)))
                owner = next((r for r in obj.metadata.owner_references if r.kind == "Machine"), None)
                machines = (
                    [owner.name]
                    if owner
                    else [
                        m.name
                        for m in self.store.list(Machine, namespace=namespace)
                        if m.spec.infrastructure_ref.kind == "AWSMachine"
                        and m.spec.infrastructure_ref.name == obj.name
                    ]
                )
                found += [(Machine, ObjectKey("Machine", namespace, name)) for name in machines]
        # Deletion waits the other way round: an owner goes once what it owns has gone.
        elif isinstance(obj, Cluster):
            found.append(_ref_key(obj.spec.infrastructure_ref, namespace))
            found += [
                (Machine, key_of(m))
                for m in self.store.list(Machine, namespace=namespace)
                if m.spec.cluster_name == obj.name
            ]
        elif isinstance(obj, Machine):
            found.append(_ref_key(obj.spec.infrastructure_ref, namespace))
        elif isinstance(obj, AWSCluster):
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL) or obj.name
            found += [
                (AWSMachine, key_of(m))
                for m in self.store.list(
                    AWSMachine, namespace=namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
                )
            ]
        return [f for f in found if f is not None]


def find_blocked(
    store: ObjectStore,
    manager: Manager,
    targets: Sequence[KubeObject],
    current: Sequence[KubeObject | None],
    goal: Goal,
) -> dict[str, Blocked]:
    """For each target (by ``ref()``) that cannot reach the goal by itself, why.

    ``current`` is each target as now stored (None when gone). Conditions and what an object waits on
    count only once this run has reconciled the object, so a status written by an earlier run never ends
    a wait.
    """
    graph = _Graph(store, goal)
    target_keys = {key_of(t) for t in targets}
    for target, obj in zip(targets, current, strict=True):
        graph.remember(key_of(target), obj)
    memo: dict[ObjectKey, Blocked | None] = {}

    def own(key: ObjectKey, obj: KubeObject | None) -> Blocked | None:
        if goal == "ready" and key in target_keys:
            if obj is None:
                return Blocked(DELETED, "deleted by another process while waiting for it to be ready")
            if obj.being_deleted:
                return Blocked(
                    BEING_DELETED,
                    f"marked for deletion at {obj.metadata.deletion_timestamp} by another process "
                    "while waiting for it to be ready",
                )
        if obj is None:
            return None
        endpoint = _endpoint_block(manager, key)
        if endpoint is not None:
            return endpoint
        if goal == "ready" and key in manager.reconciled_keys:
            return _condition_block(obj)
        return None

    def blocked(kind: type[KubeObject], key: ObjectKey, path: frozenset[ObjectKey]) -> Blocked | None:
        if key in memo:
            return memo[key]
        obj = graph.get(kind, key)
        found = own(key, obj)
        # What it waits on counts once this run has reconciled it (so its own condition, if it sets
        # one, is current and comes first).
        if found is None and obj is not None and key in manager.reconciled_keys:
            for dep_kind, dep_key in graph.waits_on(obj):
                if dep_key in path:
                    continue
                dep = graph.get(dep_kind, dep_key)
                if dep is None:
                    if goal == "ready" and dep_key not in target_keys:
                        found = Blocked(
                            f"{dep_key.kind}NotFound",
                            f"waits on {label(dep_key)}, which does not exist",
                        )
                        break
                    if goal == "gone":
                        continue
                inner = blocked(dep_kind, dep_key, path | {key})
                if inner is not None:
                    found = Blocked(inner.reason, f"waits on {label(dep_key)}: {inner.message}")
                    break
        if not path:
            memo[key] = found
        return found

    result: dict[str, Blocked] = {}
    for target in targets:
        key = key_of(target)
        found = blocked(type(target), key, frozenset())
        if found is not None and key in manager.reconciled_keys and graph.forget(key):
            # ``current`` comes from a watch that may lag the store: a target found blocked is read
            # again, so that a condition its reconcile wrote since (its own, more precise reason) counts.
            memo.pop(key, None)
            found = blocked(type(target), key, frozenset())
        if found is not None:
            result[target.ref()] = found
    return result
