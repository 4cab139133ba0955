"""The passes an infrastructure controller of a Cluster API object runs: the AWSMachine controller (one
instance per Machine) and the AWSMachinePool controller (an Auto Scaling group per MachinePool).

Both follow the same prelude before any AWS call (:func:`reconcile_infrastructure`): the object's owner
(Machine or MachinePool), its Cluster and the AWSCluster; a deletion (unless the object is left alone);
pause; the finalizer and the store's uid; an image to launch; the cluster's network recorded; the merged
tags within AWS's budget; the bootstrap data; the client pool of the cluster's identity (looked at again
after :data:`~controllers.identity.RECHECK_AFTER` when it cannot be had, sooner on a watch event of the
identity). What differs is given by an
:class:`InfrastructureKind` and the controller's create pass, which receives a :class:`Prepared`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectReference
from capa_py.aws.session import AWSClients, ClientPool
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.result import Result, ignore_exit, no_requeue
from capa_py.engine.engine import Engine
from capa_py.engine.recorder import StatusRecorder
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tag_budget import merged_tag_issue
from controllers.aws_scope import ReconcileScope, bootstrap_data, in_scope, resolve_owners
from controllers.base import (
    add_finalizer,
    fetch,
    left_alone,
    mark_paused,
    on_pause_transition,
    patch_status,
    pause_reason,
    paused_view,
    record_store_uid,
    remove_finalizer,
    settle,
)
from controllers.events import DELETION_BLOCKED
from controllers.identity import WATCHED_KINDS as IDENTITY_WATCHED_KINDS
from controllers.identity import AWSController, Identities, cluster_name_of
from controllers.services import images
from controllers.services.instances import security_group_roles

InfraT = TypeVar("InfraT", bound=KubeObject)
OwnerT = TypeVar("OwnerT", bound=KubeObject)
_log = get_logger("controller.infrastructure")


def missing_infrastructure(awscluster: AWSCluster, control_plane: bool) -> str | None:
    """What of the cluster's network the machine's instance needs and is not recorded yet (or that the
    cluster is going away), or None."""
    if awscluster.being_deleted:
        return f"{awscluster.ref()} is being deleted"
    network = awscluster.status.network
    missing = [] if network.subnets else ["subnets"]
    groups = [r for r in security_group_roles(control_plane) if r not in network.security_groups]
    if groups:
        missing.append(f"security groups {', '.join(groups)}")
    if not missing:
        return None
    return f"{awscluster.ref()} has not recorded its {' and '.join(missing)} yet"


def network_view(awscluster: AWSCluster) -> object:
    """What machines need of an AWSCluster: its subnets, security groups and target group (a change to
    anything else, such as a route table or the cluster becoming ready, does not wake them). Nothing
    until the subnets and every cluster security group are recorded: a machine can launch only then, and
    the parts recorded one write apart would otherwise wake it once per part."""
    network = awscluster.status.network
    if not network.subnets or any(r not in network.security_groups for r in security_group_roles(True)):
        return None
    lb = network.api_server_load_balancer
    return (
        [(s.id, s.availability_zone, s.is_public) for s in network.subnets],
        {role: group.id for role, group in network.security_groups.items()},
        lb.target_group_arn if lb is not None else None,
        sorted(awscluster.spec.additional_tags.items()),  # the machines' instances carry them too
        sorted(images.image_lookup_view(awscluster).items(), key=lambda kv: kv[0]),  # a lookup's defaults
    )


class AWSInfrastructureController(AWSController):
    """The AWSMachine and AWSMachinePool controllers' common part: what wakes them of an AWSCluster
    (:func:`network_view`) and of a Cluster (its pause)."""

    # Machines need the cluster's subnets, security groups and target group, not every status write,
    # and of the Cluster only whether it is paused.
    views: ClassVar[dict[str, Callable[[Any], object]]] = {"AWSCluster": network_view, "Cluster": paused_view}

    infrastructure: ClassVar[InfrastructureKind[Any, Any]]

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        """The objects of this kind an event concerns: its owner's, those of a cluster's AWSCluster, those
        of a Cluster being paused or unpaused, those whose owner names a bootstrap data Secret, and those of
        the clusters whose identity chain names a changed identity (or a static identity's Secret)."""
        spec = self.infrastructure
        kind = spec.kind.KIND
        obj = event.object
        namespace = obj.metadata.namespace or ""
        woken = self._identity_users(event) if isinstance(obj, IDENTITY_WATCHED_KINDS) else []
        if isinstance(obj, IDENTITY_WATCHED_KINDS) and not isinstance(obj, Secret):
            return woken
        if isinstance(obj, spec.owner_kind):
            ref = spec.infrastructure_ref(obj)
            return [ObjectKey(kind, namespace, ref.name)] if ref.kind == kind and ref.name else []
        if isinstance(obj, AWSCluster):
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            if not cluster:
                return []
            return [
                ObjectKey(kind, namespace, m.name)
                for m in self.store.list(
                    spec.kind, namespace=namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
                )
            ]
        if isinstance(obj, Cluster):
            return on_pause_transition(self.store, event, kind)
        if isinstance(obj, Secret):
            refs = [
                spec.infrastructure_ref(o)
                for o in self.store.list(spec.owner_kind, namespace=namespace)
                if spec.secret_name(o) == obj.name
            ]
            return woken + [ObjectKey(kind, namespace, r.name or "") for r in refs if r.kind == kind]
        return []

    def _identity_users(self, event: WatchEvent[Any]) -> list[ObjectKey]:
        kind = self.infrastructure.kind
        return [
            ObjectKey(kind.KIND, c.metadata.namespace or "", m.name)
            for c in self.identities.users_of(event.object, event.type == "DELETED")
            if (cluster := cluster_name_of(self.store, c))
            for m in self.store.list(
                kind, namespace=c.metadata.namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
            )
        ]

    def reconcile(self, key: ObjectKey) -> Result:
        return reconcile_infrastructure(self, key, self.infrastructure, lambda ready: self.create(key, ready))

    def create(self, key: ObjectKey, ready: Prepared[Any, Any]) -> Result:
        """The create pass, once the prelude found what it needs."""
        raise NotImplementedError


class InfrastructureController(Protocol):
    """What the passes need of a controller: its store, engine, events and clients."""

    store: ObjectStore
    pool: ClientPool
    engine: Engine
    events: EventRecorder
    identities: Identities


@dataclass(frozen=True)
class InfrastructureKind(Generic[InfraT, OwnerT]):
    """What sets one infrastructure kind apart in the shared prelude."""

    kind: type[InfraT]
    owner_kind: type[OwnerT]
    finalizer: str
    condition: str
    """The condition that says what the object waits for (with ``Ready``)."""
    cluster_name: Callable[[OwnerT], str]
    has_image: Callable[[InfraT, OwnerT], bool]
    """Whether an image is given or can be looked up (else ``MissingAMI``)."""
    missing_infrastructure: Callable[[AWSCluster, OwnerT], str | None]
    additional_tags: Callable[[InfraT], dict[str, str]]
    secret_name: Callable[[OwnerT], str | None]
    infrastructure_ref: Callable[[OwnerT], ObjectReference]
    """The owner's reference to its infrastructure object."""
    unnamed_secret: str
    """What the object waits for when its owner names no bootstrap data secret."""
    no_image: str
    delete: Action
    deleting: str
    """What the delete pass says it does while it waits."""
    refusal: Callable[[InfraT, AWSCluster, Secret], tuple[str, str] | None] | None = None
    """Why the object cannot be built with this bootstrap data (a reason and a message naming the field),
    checked before anything is made; None: it can."""
    delete_scope: Callable[[ReconcileScope[Any], OwnerT | None, object], ReconcileScope[Any]] | None = None
    """The kind's own delete scope, made from the pass's (with the owner and the AWSCluster, if any)."""


@dataclass(frozen=True)
class Prepared(Generic[InfraT, OwnerT]):
    """What a create pass starts from, once the prelude found everything it needs."""

    obj: InfraT
    owner: OwnerT
    cluster: Cluster
    awscluster: AWSCluster
    bootstrap: bytes
    aws: AWSClients
    additional_tags: dict[str, str]
    bootstrap_secret: Secret


def reconcile_infrastructure(
    controller: InfrastructureController,
    key: ObjectKey,
    spec: InfrastructureKind[InfraT, OwnerT],
    create: Callable[[Prepared[InfraT, OwnerT]], Result],
) -> Result:
    """One reconcile of an infrastructure object: the shared prelude, then ``create`` or the delete pass."""
    obj = fetch(controller.store, spec.kind, key)
    if obj is None:
        return no_requeue()
    owners = resolve_owners(controller.store, obj, spec.owner_kind, spec.cluster_name)
    owner, cluster, awscluster = owners.owner, owners.cluster, owners.infrastructure

    def waiting(reason: str, message: str, severity: str = "Info") -> Result:
        assert obj is not None  # the object as the prelude last wrote it
        return mark_waiting(controller.store, obj, spec.condition, reason, message, severity)

    if obj.being_deleted:
        if left_alone(obj, cluster):
            return no_requeue()
        cluster_name = cluster.name if cluster else obj.metadata.labels.get(CLUSTER_NAME_LABEL, "")
        return delete_pass(controller, obj, owner, cluster_name, awscluster, spec, waiting)
    if owner is None or cluster is None:
        return no_requeue()  # Cluster API core has not claimed it yet
    paused = pause_reason(obj, cluster)
    if paused is not None:
        mark_paused(controller.store, obj, paused)
        return no_requeue()
    if not isinstance(awscluster, AWSCluster):
        return waiting("WaitingForClusterInfrastructure", "the AWSCluster does not exist yet")
    obj = add_finalizer(controller.store, obj, spec.finalizer)
    obj = record_store_uid(controller.store, obj)
    if not spec.has_image(obj, owner):
        return waiting("MissingAMI", spec.no_image, "Error")
    missing = spec.missing_infrastructure(awscluster, owner)
    if missing is not None:
        return waiting("WaitingForClusterInfrastructure", missing)
    own_tags = spec.additional_tags(obj)
    tags_issue = merged_tag_issue(awscluster.spec.additional_tags, own_tags)
    if tags_issue is not None:
        return waiting("InvalidTags", f"spec.additionalTags: {tags_issue}", "Error")
    bootstrap = bootstrap_data(controller.store, obj.namespace, spec.secret_name(owner), spec.unnamed_secret)
    if isinstance(bootstrap, str):
        return waiting("WaitingForBootstrapData", bootstrap)
    data, secret = bootstrap
    refused = spec.refusal(obj, awscluster, secret) if spec.refusal is not None else None
    if refused is not None:
        return waiting(*refused, "Error")
    pool = controller.identities.pool_or_wait(awscluster, waiting)
    if isinstance(pool, Result):
        return pool
    return create(
        Prepared(
            obj,
            owner,
            cluster,
            awscluster,
            data,
            pool.for_region(awscluster.spec.region),
            {**awscluster.spec.additional_tags, **own_tags},
            secret,
        )
    )


def mark_waiting(
    store: ObjectStore, obj: KubeObject, condition: str, reason: str, message: str, severity: str = "Info"
) -> Result:
    """Say on ``obj`` (its ``condition`` and ``Ready``, False) what a reconcile waits for; no requeue (the
    watches bring it back)."""

    def apply(o: Any) -> None:
        set_condition(o.status, condition, False, reason, message, severity)
        set_condition(o.status, READY, False, reason, message, severity)

    patch_status(store, obj, apply)
    return no_requeue()


def create_pass(
    controller: object,
    key: ObjectKey,
    scope: ReconcileScope[Any],
    workflow: Action,
    conditions: Sequence[str],
) -> Result:
    """Run a declared create ``workflow`` over ``scope``, summarise ``Ready`` from ``conditions``, write the
    status."""
    result = ignore_exit(workflow.run(in_scope(scope)))
    scope.summarize(conditions)
    settle(controller, key, scope.obj)
    scope.patch()
    return result


def delete_pass(
    controller: InfrastructureController,
    obj: KubeObject,
    owner: KubeObject | None,
    cluster_name: str,
    awscluster: object,
    spec: InfrastructureKind[Any, Any],
    waiting: Callable[[str, str, str], object],
) -> Result:
    """Delete what ``obj`` made, with the clients of its cluster's identity (its resources are in that
    account: only those credentials can delete them), then drop the finalizer; while it waits, the reason
    is recorded as an event."""
    if spec.finalizer not in obj.metadata.finalizers:
        return no_requeue()
    region = awscluster.spec.region if isinstance(awscluster, AWSCluster) else None
    pool: ClientPool | Result = controller.pool
    if isinstance(awscluster, AWSCluster):
        pool = controller.identities.pool_or_wait(awscluster, waiting)
    if isinstance(pool, Result):
        return pool
    scope: ReconcileScope[Any] = ReconcileScope(
        controller.store,
        StatusRecorder(controller.store, obj),
        controller.engine,
        pool.for_region(region),
        cluster_name,
        events=controller.events,
    )
    if spec.delete_scope is not None:
        scope = spec.delete_scope(scope, owner, awscluster)
    deleting = spec.deleting

    def mark_deleting(o: Any) -> None:
        o.status.ready = False
        set_condition(o.status, READY, False, "Deleting", deleting, "Info")

    scope.change_status(mark_deleting)
    result = spec.delete.run(in_scope(scope))
    scope.patch()
    if result.interrupts:
        if scope.waiting_on:
            controller.events.normal(scope.obj, DELETION_BLOCKED, scope.waiting_on)
        return result
    remove_finalizer(controller.store, scope.obj, spec.finalizer)
    _log.info("infrastructure deleted", object=obj.ref())
    return no_requeue()
