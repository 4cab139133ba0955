"""The create pass of a TinkerbellMachine: claim Hardware, write its user-data, make its Template and
Workflow, wait for the Workflow, mark the machine ready (the steps are described in
:mod:`controllers.tinkerbell_capi`)."""

from __future__ import annotations

import contextlib
from typing import Any, cast

from capa_py.api.cluster import CLUSTER_NAME_LABEL
from capa_py.api.conditions import READY, set_condition, summarize_ready
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
    TinkerbellMachine,
    parse_template_override,
)
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result, exit_workflow, ignore_exit, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.informer import api_reader
from capa_py.store.errors import AlreadyExists, Conflict, NotFound
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore
from controllers.base import patch_status
from controllers.tinkerbell_hardware import (
    hardware_addresses,
    is_free,
    owned_by,
    provider_id,
    rank,
    release,
)

HARDWARE_READY = "HardwareReady"
WORKFLOW_READY = "WorkflowReady"
MACHINE_CONDITIONS = (HARDWARE_READY, WORKFLOW_READY)
"""What a TinkerbellMachine's Ready summarises, in order (where a workflow failure is not the reason)."""
NO_HARDWARE = "NoHardwareAvailable"
WORKFLOW_FAILED = "WorkflowFailed"
EVENT_CLAIMED = "HardwareClaimed"
EVENT_PROVISIONED = "Provisioned"
MAX_CLAIM_ATTEMPTS = 10
MACHINE_GONE = "MachineDeleted"
"""Why a create pass stopped: the machine was deleted (or marked) after the pass read it."""
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


class MachineCreate:
    """One create pass over one TinkerbellMachine, as ctrlkit actions (the steps are described in
    :mod:`controllers.tinkerbell_capi`)."""

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
                if self._gone_after_claim(hardware):
                    return exit_workflow(MACHINE_GONE)
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
                if self._gone_after_claim(claimed):
                    return exit_workflow(MACHINE_GONE)
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

    def _gone_after_claim(self, claimed: Hardware) -> bool:
        """Whether the machine, read as stored after the claim, is gone or being deleted; its claim then
        released. Another reconciler may have deleted it since this pass read it: its delete pass lists the
        Hardware after marking the machine, so a claim it did not see was written after the mark, which this
        read sees."""
        stored = get_or_none(api_reader(self.store), TinkerbellMachine, self.obj.name, self.namespace)
        if stored is not None and stored.metadata.uid == self.obj.metadata.uid and not stored.being_deleted:
            return False
        release(self.store, claimed, self.obj)
        _log.info(
            "claim released: the machine was deleted meanwhile", machine=self.obj.ref(), hardware=claimed.name
        )
        return True

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
