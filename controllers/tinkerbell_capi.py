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

import contextlib
from collections.abc import Iterable
from typing import Any, cast

from capa_py.api.cluster import (
    CLUSTER_NAME_LABEL,
    Cluster,
    Machine,
    MachineAddress,
)
from capa_py.api.conditions import READY, set_condition, summarize_ready
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.tinkerbell import (
    Action as TemplateAction,
)
from capa_py.api.tinkerbell import (
    Hardware,
    Instance,
    LocalObjectReference,
    Template,
    TemplateSpec,
    Workflow,
    WorkflowSpec,
)
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    PROVIDER_ID_SCHEME,
    TINKERBELL_MACHINE_FINALIZER,
    HardwareAffinity,
    TinkerbellCluster,
    TinkerbellMachine,
    TinkerbellMachineSpec,
    endpoint_issues,
    parse_template_override,
)
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result, exit_workflow, ignore_exit, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.informer import api_reader
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import AlreadyExists, Conflict, NotFound
from capa_py.store.helpers import get_or_none, retry_on_conflict
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
    remove_finalizer,
    resolve_ref,
    settle,
)

BOOTSTRAP_KEY = "value"
HARDWARE_READY = "HardwareReady"
WORKFLOW_READY = "WorkflowReady"
MACHINE_CONDITIONS = (HARDWARE_READY, WORKFLOW_READY)
"""What a TinkerbellMachine's Ready summarises, in order (where a workflow failure is not the reason)."""
NO_HARDWARE = "NoHardwareAvailable"
WORKFLOW_FAILED = "WorkflowFailed"
EVENT_CLAIMED = "HardwareClaimed"
EVENT_PROVISIONED = "Provisioned"
EVENT_RELEASED = "HardwareReleased"
MAX_CLAIM_ATTEMPTS = 10
"""Conflicts in one reconcile before the claim is left to the next (each conflict is another machine
having claimed, or changed, the Hardware selected)."""

DEFAULT_IMAGE_URL = "http://tinkerbell.local/images/ubuntu.raw.gz"
"""What the default template streams to disk: a placeholder; a real image is set with templateOverride."""

_log = get_logger("controller.tinkerbellmachine")


def default_template_spec() -> TemplateSpec:
    """The template a TinkerbellMachine without ``templateOverride`` provisions with: an image streamed to
    the Hardware's first storage device, cloud-init pointed at Hegel, then a kexec into the new system —
    the Tinkerbell hub's actions."""
    disk = "{{ index .Hardware.Disks 0 }}"
    return TemplateSpec(
        actions=[
            TemplateAction(
                name="stream-image",
                image="quay.io/tinkerbell/actions/image2disk:latest",
                env={"DEST_DISK": disk, "IMG_URL": DEFAULT_IMAGE_URL, "COMPRESSED": "true"},
                timeout=600,
            ),
            TemplateAction(
                name="add-cloud-init-datasource",
                image="quay.io/tinkerbell/actions/writefile:latest",
                env={
                    "DEST_DISK": disk + "1",
                    "FS_TYPE": "ext4",
                    "DEST_PATH": "/etc/cloud/cloud.cfg.d/10_tinkerbell.cfg",
                    "CONTENTS": "datasource: Ec2: {metadata_urls: ['http://{{ .hegel_address }}']}",
                    "MODE": "0600",
                },
                timeout=90,
            ),
            TemplateAction(
                name="kexec",
                image="quay.io/tinkerbell/actions/kexec:latest",
                env={"BLOCK_DEVICE": disk + "1", "FS_TYPE": "ext4"},
                timeout=90,
            ),
        ]
    )


DEFAULT_HEGEL_ADDRESS = "127.0.0.1:50061"
"""``hegel_address`` in every machine's workflow data (``{{ .hegel_address }}`` in a template): the
address Hegel listens on by default."""


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


# -- Hardware selection ----------------------------------------------------------------------------------
def owned_by(hardware: Hardware, machine: TinkerbellMachine) -> bool:
    labels = hardware.metadata.labels
    return labels.get(HARDWARE_OWNER_NAME_LABEL) == machine.name and labels.get(
        HARDWARE_OWNER_NAMESPACE_LABEL
    ) == (machine.metadata.namespace or "")


def is_free(hardware: Hardware) -> bool:
    return HARDWARE_OWNER_NAME_LABEL not in hardware.metadata.labels and not hardware.being_deleted


def rank(candidates: Iterable[Hardware], affinity: HardwareAffinity | None) -> list[Hardware]:
    """The free Hardware ``affinity`` allows, best first: highest summed preferred weight, then name."""
    affinity = affinity or HardwareAffinity()
    allowed = [h for h in candidates if is_free(h) and affinity.qualifies(h.metadata.labels)]
    return sorted(allowed, key=lambda h: (-affinity.score(h.metadata.labels), h.name))


def hardware_addresses(hardware: Hardware) -> list[MachineAddress]:
    """InternalIP for every DHCP address and Hostname for every DHCP hostname, in MAC order."""
    found: list[MachineAddress] = []
    for _, interface in sorted(hardware.spec.network_interfaces.items()):
        if interface.dhcp is None:
            continue
        found.append(MachineAddress(type="InternalIP", address=interface.dhcp.ip))
        if interface.dhcp.hostname:
            found.append(MachineAddress(type="Hostname", address=interface.dhcp.hostname))
    unique: dict[tuple[str, str], MachineAddress] = {(a.type, a.address): a for a in found}
    return list(unique.values())


def provider_id(namespace: str, hardware: str) -> str:
    return f"{PROVIDER_ID_SCHEME}://{namespace}/{hardware}"


class MachineCreate:
    """One create pass over one TinkerbellMachine, as ctrlkit actions (see the module docstring)."""

    def __init__(
        self, store: ObjectStore, obj: TinkerbellMachine, bootstrap: str, events: EventRecorder
    ) -> None:
        self.store = store
        self.obj = obj
        self.bootstrap = bootstrap
        self.events = events
        self.hardware: Hardware | None = None
        self.workflow: Workflow | None = None

    @property
    def namespace(self) -> str:
        return self.obj.metadata.namespace or "default"

    def _status(self, apply: Any) -> None:
        self.obj = patch_status(self.store, self.obj, apply)

    def _spec(self, change: Any) -> None:
        self.obj = retry_on_conflict(self.store, self.obj, change)

    # -- steps ----------------------------------------------------------------------------------------
    def claim_hardware(self, ctx: Context) -> Result | None:
        named = self.obj.spec.hardware_name
        if named:
            hardware = get_or_none(self.store, Hardware, named, self.namespace)
            if hardware is None:
                return self._hardware_lost(f"hardware {self.namespace}/{named} (spec.hardwareName) is gone")
            if not owned_by(hardware, self.obj):
                if not is_free(hardware):
                    owner = hardware.metadata.labels.get(HARDWARE_OWNER_NAME_LABEL)
                    return self._hardware_lost(
                        f"hardware {self.namespace}/{named} (spec.hardwareName) is owned by {owner}"
                    )
                hardware = self._claim(hardware)
                if hardware is None:
                    return requeue_after(1.0)
            self.hardware = hardware
            return None
        for _ in range(MAX_CLAIM_ATTEMPTS):
            # As stored, not as cached: Hardware applied with the machine may not have reached the cache.
            listed = api_reader(self.store).list(Hardware, namespace=self.namespace)
            mine = [h for h in listed if owned_by(h, self.obj)]
            if mine:
                # Claimed before a crash kept the claim from being recorded: it is this machine's.
                self.hardware = min(mine, key=lambda h: h.name)
                return None
            ranked = rank(listed, self.obj.spec.hardware_affinity)
            if not ranked:
                return self._no_hardware(len(listed))
            claimed = self._claim(ranked[0])
            if claimed is not None:
                self.hardware = claimed
                _log.info("hardware claimed", machine=self.obj.ref(), hardware=claimed.name)
                self.events.normal(self.obj, EVENT_CLAIMED, f"claimed hardware {claimed.name}")
                return None
        return requeue_after(1.0)

    def _claim(self, hardware: Hardware) -> Hardware | None:
        """Write this machine's ownership labels on ``hardware`` as read (its resourceVersion): None when
        someone wrote it since (another machine's claim, most likely)."""
        claimed = hardware.model_copy(deep=True)
        claimed.metadata.labels[HARDWARE_OWNER_NAME_LABEL] = self.obj.name
        claimed.metadata.labels[HARDWARE_OWNER_NAMESPACE_LABEL] = self.namespace
        try:
            return self.store.update(claimed)
        except (Conflict, NotFound):
            return None

    def _no_hardware(self, total: int) -> Result:
        affinity = self.obj.spec.hardware_affinity
        constrained = affinity is not None and bool(affinity.required)
        message = (
            f"no free hardware in namespace {self.namespace}"
            + (" matches spec.hardwareAffinity.required" if constrained else "")
            + f" ({total} hardware in the namespace)"
        )

        def apply(o: TinkerbellMachine) -> None:
            o.status.ready = False
            set_condition(o.status, HARDWARE_READY, False, NO_HARDWARE, message, "Warning")
            summarize_ready(o.status, MACHINE_CONDITIONS)

        before = self.obj
        self._status(apply)
        if self.obj is not before:
            self.events.warning(self.obj, NO_HARDWARE, message)
        # A Hardware event (a new one, a label change, a release) wakes the machine: nothing to poll.
        return exit_workflow(NO_HARDWARE)

    def _hardware_lost(self, message: str) -> Result:
        def apply(o: TinkerbellMachine) -> None:
            o.status.ready = False
            set_condition(o.status, HARDWARE_READY, False, "HardwareLost", message, "Error")
            summarize_ready(o.status, MACHINE_CONDITIONS)

        self._status(apply)
        return exit_workflow("HardwareLost")

    def record_hardware(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        name = self.hardware.name
        if self.obj.spec.hardware_name != name:

            def record(o: TinkerbellMachine) -> None:
                o.spec.hardware_name = name

            self._spec(record)
        return None

    def write_user_data(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        instance = self.hardware.spec.instance
        if instance is not None and instance.userdata == self.bootstrap:
            return None
        data = self.bootstrap

        def write(h: Hardware) -> None:
            if h.spec.instance is None:
                h.spec.instance = Instance()
            h.spec.instance.userdata = data

        self.hardware = retry_on_conflict(self.store, self.hardware, write)
        _log.info("user-data written", machine=self.obj.ref(), hardware=self.hardware.name)
        return None

    def _owned(self, obj: KubeObject) -> KubeObject:
        obj.metadata.owner_references = [self.obj.owner_reference(controller=True)]
        cluster = self.obj.metadata.labels.get(CLUSTER_NAME_LABEL)
        if cluster:
            obj.metadata.labels[CLUSTER_NAME_LABEL] = cluster
        return obj

    def ensure_template(self, ctx: Context) -> Result | None:
        if get_or_none(self.store, Template, self.obj.name, self.namespace) is not None:
            return None
        override = self.obj.spec.template_override
        spec = parse_template_override(override) if override is not None else default_template_spec()
        template = self._owned(
            Template(metadata=ObjectMeta(name=self.obj.name, namespace=self.namespace), spec=spec)
        )
        with contextlib.suppress(AlreadyExists):
            self.store.create(template)
        return None

    def ensure_workflow(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        found = get_or_none(self.store, Workflow, self.obj.name, self.namespace)
        if found is None:
            data: dict[str, Any] = {"hegel_address": DEFAULT_HEGEL_ADDRESS}
            workflow = self._owned(
                Workflow(
                    metadata=ObjectMeta(name=self.obj.name, namespace=self.namespace),
                    spec=WorkflowSpec(
                        hardware_ref=LocalObjectReference(name=self.hardware.name),
                        template_ref=LocalObjectReference(name=self.obj.name),
                        template_data=data,
                    ),
                )
            )
            try:
                found = cast(Workflow, self.store.create(workflow))
            except AlreadyExists:
                found = self.store.get(Workflow, self.obj.name, self.namespace)
            _log.info("workflow created", machine=self.obj.ref(), hardware=self.hardware.name)
        self.workflow = found
        return None

    def wait_for_workflow(self, ctx: Context) -> Result | None:
        assert self.workflow is not None
        status = self.workflow.status
        state = status.state or "Pending"
        if state == "Succeeded":
            return None
        if state in ("Failed", "Canceled"):
            reason = status.reason or WORKFLOW_FAILED
            message = f"workflow {self.workflow.name} {state.lower()}: {status.message or reason}"

            def failed(o: TinkerbellMachine) -> None:
                o.status.ready = False
                o.status.instance_status = state
                o.status.error_reason = WORKFLOW_FAILED
                o.status.error_message = message
                set_condition(o.status, WORKFLOW_READY, False, reason, message, "Error")
                set_condition(o.status, READY, False, WORKFLOW_FAILED, message, "Error")

            before = self.obj
            self._status(failed)
            if self.obj is not before:
                self.events.warning(self.obj, WORKFLOW_FAILED, message)
            return exit_workflow(WORKFLOW_FAILED)
        hardware = self.hardware.name if self.hardware is not None else ""
        message = f"workflow {self.workflow.name} is {state} on hardware {hardware}"

        def waiting(o: TinkerbellMachine) -> None:
            o.status.ready = False
            o.status.instance_status = state
            set_condition(o.status, HARDWARE_READY, True)
            set_condition(o.status, WORKFLOW_READY, False, "Workflow" + state, message, "Info")
            summarize_ready(o.status, MACHINE_CONDITIONS)

        self._status(waiting)
        # The Workflow's own status writes wake the machine: nothing to poll.
        return exit_workflow("WaitingForWorkflow")

    def mark_ready(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        pid = provider_id(self.namespace, self.hardware.name)
        if self.obj.spec.provider_id != pid:

            def set_pid(o: TinkerbellMachine) -> None:
                o.spec.provider_id = pid

            self._spec(set_pid)
        found = hardware_addresses(self.hardware)

        def ready(o: TinkerbellMachine) -> None:
            o.status.ready = True
            o.status.instance_status = "Succeeded"
            o.status.addresses = [a.model_copy() for a in found]
            o.status.error_reason = None
            o.status.error_message = None
            o.status.observed_generation = o.metadata.generation
            set_condition(o.status, HARDWARE_READY, True)
            set_condition(o.status, WORKFLOW_READY, True)
            summarize_ready(o.status, MACHINE_CONDITIONS)

        before = self.obj
        self._status(ready)
        if self.obj is not before:
            self.events.normal(self.obj, EVENT_PROVISIONED, f"provisioned on hardware {self.hardware.name}")
        return None

    def workflow_graph(self) -> Action:
        return Sequential(
            wrap_action("ClaimHardware", self.claim_hardware),
            wrap_action("RecordHardware", self.record_hardware),
            wrap_action("WriteUserData", self.write_user_data),
            wrap_action("EnsureTemplate", self.ensure_template),
            wrap_action("EnsureWorkflow", self.ensure_workflow),
            wrap_action("WaitForWorkflow", self.wait_for_workflow),
            wrap_action("MarkReady", self.mark_ready),
        )

    def run(self) -> Result:
        return ignore_exit(self.workflow_graph().run(Context()))


class MachineDelete:
    """One delete pass: Workflow (waited for), Template, the Hardware released, the finalizer."""

    def __init__(self, store: ObjectStore, obj: TinkerbellMachine, events: EventRecorder) -> None:
        self.store = store
        self.obj = obj
        self.events = events

    @property
    def namespace(self) -> str:
        return self.obj.metadata.namespace or "default"

    def delete_workflow(self, ctx: Context) -> Result | None:
        workflow = get_or_none(self.store, Workflow, self.obj.name, self.namespace)
        if workflow is None or not self._mine(workflow):
            return None
        if not workflow.being_deleted:
            with contextlib.suppress(NotFound):
                self.store.delete(Workflow, workflow.name, self.namespace)

        def waiting(o: TinkerbellMachine) -> None:
            o.status.ready = False
            set_condition(
                o.status, READY, False, "Deleting", f"waiting for workflow {workflow.name} to be gone", "Info"
            )

        self.obj = patch_status(self.store, self.obj, waiting)
        # Its deletion event wakes the machine; the requeue is a safety net, not a poll loop.
        return requeue_after(30.0)

    def delete_template(self, ctx: Context) -> Result | None:
        template = get_or_none(self.store, Template, self.obj.name, self.namespace)
        if template is not None and self._mine(template):
            with contextlib.suppress(NotFound):
                self.store.delete(Template, template.name, self.namespace)
        return None

    def release_hardware(self, ctx: Context) -> Result | None:
        for hardware in self.store.list(Hardware, namespace=self.namespace):
            if not owned_by(hardware, self.obj):
                continue

            def release(h: Hardware) -> None:
                if not owned_by(h, self.obj):
                    return
                h.metadata.labels.pop(HARDWARE_OWNER_NAME_LABEL, None)
                h.metadata.labels.pop(HARDWARE_OWNER_NAMESPACE_LABEL, None)
                if h.spec.instance is not None:
                    h.spec.instance.userdata = None

            with contextlib.suppress(NotFound):
                retry_on_conflict(self.store, hardware, release)
            _log.info("hardware released", machine=self.obj.ref(), hardware=hardware.name)
            self.events.normal(self.obj, EVENT_RELEASED, f"released hardware {hardware.name}")
        return None

    def _mine(self, obj: KubeObject) -> bool:
        return any(r.uid == self.obj.metadata.uid for r in obj.metadata.owner_references)

    def workflow_graph(self) -> Action:
        return Sequential(
            wrap_action("DeleteWorkflow", self.delete_workflow),
            wrap_action("DeleteTemplate", self.delete_template),
            wrap_action("ReleaseHardware", self.release_hardware),
        )

    def run(self) -> Result:
        result = self.workflow_graph().run(Context())
        if result.interrupts:
            return result
        remove_finalizer(self.store, self.obj, TINKERBELL_MACHINE_FINALIZER)
        _log.info("machine infrastructure deleted", machine=self.obj.ref())
        return no_requeue()


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
    "DEFAULT_IMAGE_URL",
    "HARDWARE_READY",
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
