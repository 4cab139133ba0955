"""The Cluster API bare-metal provider's controllers: TinkerbellCluster and TinkerbellMachine.

TinkerbellCluster: its ``spec.controlPlaneEndpoint`` is given (host and port checked on write); the
controller marks it ``ready``, and Cluster API core copies the endpoint to the Cluster.

TinkerbellMachine, once its Machine, the Cluster's TinkerbellCluster (ready) and the bootstrap data secret
are there, runs a ctrlkit graph (``capa ctrlkit graph controllers.tinkerbell_capi:machine_create_graph``):

1. ``ClaimHardware``: the Hardware already labelled as this machine's (a claim whose record was lost to a
   crash), else the best free Hardware of the machine's namespace — free: no ``ownerName`` label; it
   qualifies when it matches any ``hardwareAffinity.required`` term (none: any Hardware); ranked by the
   summed weights of the ``preferred`` terms it matches, then by name. The claim writes the ownership labels
   with the Hardware's resourceVersion: a machine that loses the race gets a conflict and selects again,
   so two machines never hold one Hardware. No Hardware: ``HardwareReady=False`` (``NoHardwareAvailable``)
   and nothing more until a Hardware event (a new or released Hardware) wakes the machine.
2. ``RecordHardware``: ``spec.hardwareName``, right after the claim.
3. ``WriteUserData``: the bootstrap data (the secret's ``value``) becomes the Hardware's
   ``spec.instance.userdata``, which Hegel serves. It is never logged.
4. ``EnsureTemplate`` / ``EnsureWorkflow``: a Template (``spec.templateOverride``, or
   :func:`default_template_spec`) and a Workflow for the Hardware, both named after the machine and owned
   by it.
5. ``WaitForWorkflow``: until the Workflow is ``Succeeded`` (Workflow events wake the machine; nothing
   polls). ``Failed`` or ``Canceled``: ``status.errorReason``/``errorMessage`` and ``Ready=False``, and the
   machine stays so (deleting it is the way out; nothing retries).
6. ``MarkReady``: ``spec.providerID`` = ``tinkerbell://<namespace>/<hardware>``, ``status.addresses`` from
   the Hardware's DHCP addresses and hostnames, ``status.ready``.

Deletion: the Workflow is deleted and waited for (its finalizer holds it until it is cancelled), then the
Template; the Hardware is released (ownership labels removed, user-data cleared); then the finalizer goes.
Every step reads what exists before it writes, so a restart between any two writes resumes where it was.

Kubernetes Events on the TinkerbellMachine: ``HardwareClaimed``, ``NoHardwareAvailable`` (Warning),
``WorkflowFailed`` (Warning), ``Provisioned``, ``HardwareReleased``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from capa_py.api.cluster import Cluster, Machine
from capa_py.api.conditions import READY, set_condition
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    TINKERBELL_MACHINE_FINALIZER,
    TinkerbellCluster,
    TinkerbellMachine,
    TinkerbellMachineSpec,
    endpoint_issues,
)
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.informer import api_reader
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import (
    add_finalizer,
    cluster_view,
    fetch,
    mark_paused,
    on_pause_transition,
    patch_status,
    pause_reason,
    paused_view,
    resolve_ref,
    settle,
)
from controllers.tinkerbell_hardware import hardware_addresses, provider_id, rank
from controllers.tinkerbell_machine_create import (
    DEFAULT_HEGEL_ADDRESS,
    DEFAULT_IMAGE_URL,
    EVENT_CLAIMED,
    EVENT_PROVISIONED,
    HARDWARE_READY,
    MAX_CLAIM_ATTEMPTS,
    NO_HARDWARE,
    WORKFLOW_FAILED,
    WORKFLOW_READY,
    MachineCreate,
    default_template_spec,
)
from controllers.tinkerbell_machine_delete import EVENT_RELEASED, MachineDelete

BOOTSTRAP_KEY = "value"


# -- TinkerbellCluster -----------------------------------------------------------------------------------
class TinkerbellClusterController:
    name = "tinkerbellcluster"
    kind = TinkerbellCluster
    # Its Cluster's pause and unpause (and its claiming it): the TinkerbellCluster reports them.
    watched_kinds: tuple[type[KubeObject], ...] = (Cluster,)

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.views = {"Cluster": cluster_view}

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        cluster = event.object
        infra = cluster.spec.infrastructure_ref if isinstance(cluster, Cluster) else None
        if infra is None or infra.kind != self.kind.KIND or not infra.name:
            return []
        return [ObjectKey(self.kind.KIND, cluster.metadata.namespace or "", infra.name)]

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, TinkerbellCluster, key)
        if obj is None or obj.being_deleted:
            return no_requeue()
        paused = pause_reason(obj, self._cluster(obj))
        if paused is not None:
            mark_paused(self.store, obj, paused)
            return no_requeue()
        issues = endpoint_issues(obj.spec.control_plane_endpoint, "spec.controlPlaneEndpoint")
        ready = not issues
        message = "; ".join(f"{i.path}: {i.message}" for i in issues)

        def apply(o: TinkerbellCluster) -> None:
            o.status.ready = ready
            o.status.observed_generation = o.metadata.generation
            if ready:
                set_condition(o.status, READY, True)
            else:
                set_condition(o.status, READY, False, "InvalidEndpoint", message, "Error")

        settle(self, key, obj)
        patch_status(self.store, obj, apply)
        return no_requeue()

    def _cluster(self, obj: TinkerbellCluster) -> Cluster | None:
        """The Cluster owning it, once Cluster API core has claimed it."""
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Cluster"), None)
        return get_or_none(self.store, Cluster, owner.name, obj.namespace) if owner else None


# -- TinkerbellMachine -----------------------------------------------------------------------------------
def workflow_view(workflow: Workflow) -> object:
    """What of a Workflow its machine reacts to: its state and owners."""
    return (workflow.status.state, tuple(r.uid for r in workflow.metadata.owner_references))


class TinkerbellMachineController:
    name = "tinkerbellmachine"
    kind = TinkerbellMachine
    watched_kinds: tuple[type[KubeObject], ...] = (
        Machine,
        TinkerbellCluster,
        Secret,
        Hardware,
        Workflow,
        Cluster,
    )
    # Status writes of these wake machines: the TinkerbellCluster becoming ready, a Workflow's state (the
    # gRPC server writes only status).
    status_kinds: tuple[type[KubeObject], ...] = (TinkerbellCluster, Workflow)

    def __init__(self, store: ObjectStore, events: EventRecorder | None = None) -> None:
        self.store = store
        self.events = events if events is not None else EventRecorder(store)
        # Of a Workflow, only its state and its owners matter here (not every action's progress); of a
        # Cluster, only whether it is paused.
        self.views = {"Workflow": workflow_view, "Cluster": paused_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        if isinstance(obj, Machine):
            name = obj.infrastructure_name(self.kind.KIND)
            return [ObjectKey(self.kind.KIND, namespace, name)] if name else []
        if isinstance(obj, TinkerbellCluster):
            # The machines of the Clusters naming it (whether or not Cluster API core has labelled anything
            # yet).
            clusters = {
                c.name
                for c in self.store.list(Cluster, namespace=namespace)
                if (infra := c.spec.infrastructure_ref) is not None
                and infra.kind == obj.KIND
                and infra.name == obj.name
            }
            return [
                ObjectKey(self.kind.KIND, namespace, m.spec.infrastructure_ref.name or "")
                for m in self.store.list(Machine, namespace=namespace)
                if m.spec.cluster_name in clusters and m.spec.infrastructure_ref.kind == self.kind.KIND
            ]
        if isinstance(obj, Cluster):
            return on_pause_transition(self.store, event, self.kind.KIND)
        if isinstance(obj, Secret):
            return [
                ObjectKey(self.kind.KIND, namespace, m.spec.infrastructure_ref.name or "")
                for m in self.store.list(Machine, namespace=namespace)
                if m.spec.bootstrap.data_secret_name == obj.name
                and m.spec.infrastructure_ref.kind == self.kind.KIND
            ]
        if isinstance(obj, Workflow):
            return [
                ObjectKey(self.kind.KIND, namespace, r.name)
                for r in obj.metadata.owner_references
                if r.kind == self.kind.KIND
            ]
        if isinstance(obj, Hardware):
            owner = obj.metadata.labels.get(HARDWARE_OWNER_NAME_LABEL)
            if owner and event.type != "DELETED":
                owner_namespace = obj.metadata.labels.get(HARDWARE_OWNER_NAMESPACE_LABEL, namespace)
                return [ObjectKey(self.kind.KIND, owner_namespace, owner)]
            # A free Hardware (new, released, relabelled) or one gone: the machines still without one.
            return [
                ObjectKey(self.kind.KIND, namespace, m.name)
                for m in self.store.list(TinkerbellMachine, namespace=namespace)
                if not m.spec.hardware_name or (event.type == "DELETED" and m.spec.hardware_name == obj.name)
            ]
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, TinkerbellMachine, key)
        if obj is None:
            return no_requeue()
        if obj.being_deleted:
            if TINKERBELL_MACHINE_FINALIZER not in obj.metadata.finalizers:
                return no_requeue()
            return MachineDelete(self.store, obj, self.events).run()
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Machine"), None)
        machine = get_or_none(self.store, Machine, owner.name, obj.namespace) if owner else None
        cluster = (
            get_or_none(self.store, Cluster, machine.spec.cluster_name, obj.namespace) if machine else None
        )
        if machine is None or cluster is None:
            return no_requeue()  # Cluster API core has not claimed it yet
        paused = pause_reason(obj, cluster)
        if paused is not None:
            mark_paused(self.store, obj, paused)
            return no_requeue()
        infra = resolve_ref(self.store, cluster.spec.infrastructure_ref, obj.namespace)
        if not isinstance(infra, TinkerbellCluster) or not infra.status.ready:
            return self._waiting(obj, "WaitingForClusterInfrastructure", "the TinkerbellCluster is not ready")
        secret_name = machine.spec.bootstrap.data_secret_name
        if not secret_name:
            return self._waiting(
                obj, "WaitingForBootstrapData", "the machine has no bootstrap data secret yet"
            )
        secret = get_or_none(self.store, Secret, secret_name, obj.namespace)
        if secret is None:
            return self._waiting(obj, "WaitingForBootstrapData", f"secret {secret_name} does not exist")
        try:
            bootstrap = secret.value(BOOTSTRAP_KEY).decode()
        except KeyError:
            return self._waiting(
                obj, "WaitingForBootstrapData", f"secret {secret_name} has no key {BOOTSTRAP_KEY!r}"
            )
        except UnicodeDecodeError:
            return self._waiting(
                obj, "WaitingForBootstrapData", f"secret {secret_name}: {BOOTSTRAP_KEY!r} is not UTF-8 text"
            )
        stored = get_or_none(api_reader(self.store), TinkerbellMachine, obj.name, obj.namespace)
        if stored is None or stored.metadata.uid != obj.metadata.uid or stored.being_deleted:
            # The cache lags behind the store: another reconciler may have deleted the machine (its
            # Workflow, Template and Hardware claim first). A create pass now would make children and a
            # claim nothing undoes; the machine's own watch event brings its delete pass, if any, here.
            return no_requeue()
        obj = add_finalizer(self.store, obj, TINKERBELL_MACHINE_FINALIZER)
        create = MachineCreate(self.store, obj, bootstrap, self.events)
        result = create.run()
        settle(self, key, create.obj)
        return result

    def _waiting(self, obj: TinkerbellMachine, reason: str, message: str) -> Result:
        def apply(o: TinkerbellMachine) -> None:
            set_condition(o.status, READY, False, reason, message, "Info")

        patch_status(self.store, obj, apply)
        return no_requeue()


def machine_create_graph() -> Action:
    """The create graph (``capa ctrlkit graph controllers.tinkerbell_capi:machine_create_graph``)."""
    nowhere = cast(ObjectStore, None)
    obj = TinkerbellMachine(metadata=ObjectMeta(name="example"), spec=TinkerbellMachineSpec())
    return MachineCreate(nowhere, obj, "", EventRecorder(nowhere)).workflow_graph()


def machine_delete_graph() -> Action:
    """The delete graph (``capa ctrlkit graph controllers.tinkerbell_capi:machine_delete_graph``)."""
    nowhere = cast(ObjectStore, None)
    obj = TinkerbellMachine(metadata=ObjectMeta(name="example"), spec=TinkerbellMachineSpec())
    return MachineDelete(nowhere, obj, EventRecorder(nowhere)).workflow_graph()


def tinkerbell_capi_controllers(
    store: ObjectStore, events: EventRecorder | None = None
) -> list[TinkerbellClusterController | TinkerbellMachineController]:
    """The provider's controllers (Cluster API core's are built with the Tinkerbell kinds elsewhere)."""
    return [TinkerbellClusterController(store), TinkerbellMachineController(store, events)]


__all__ = [
    "BOOTSTRAP_KEY",
    "DEFAULT_HEGEL_ADDRESS",
    "DEFAULT_IMAGE_URL",
    "EVENT_CLAIMED",
    "EVENT_PROVISIONED",
    "EVENT_RELEASED",
    "HARDWARE_READY",
    "MAX_CLAIM_ATTEMPTS",
    "NO_HARDWARE",
    "WORKFLOW_FAILED",
    "WORKFLOW_READY",
    "MachineCreate",
    "MachineDelete",
    "TinkerbellClusterController",
    "TinkerbellMachineController",
    "default_template_spec",
    "hardware_addresses",
    "machine_create_graph",
    "machine_delete_graph",
    "provider_id",
    "rank",
    "tinkerbell_capi_controllers",
]
