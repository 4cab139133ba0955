"""The delete pass of a TinkerbellMachine: its Workflow (waited for), its Template, its Hardware released
(ownership labels removed, user-data cleared), then its finalizer."""

from __future__ import annotations

import contextlib

from capa_py.api.conditions import READY, set_condition
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import (
    TINKERBELL_MACHINE_FINALIZER,
    TinkerbellMachine,
)
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.informer import api_reader
from capa_py.store.errors import NotFound
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from controllers.base import patch_status, remove_finalizer
from controllers.tinkerbell_hardware import owned_by, release

EVENT_RELEASED = "HardwareReleased"

_log = get_logger("controller.tinkerbellmachine")


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
        # As stored, not as cached: a create pass that claimed Hardware just before this machine was marked
        # for deletion may not have reached the cache, and its claim would stay for good.
        for hardware in api_reader(self.store).list(Hardware, namespace=self.namespace):
            if not owned_by(hardware, self.obj):
                continue
            release(self.store, hardware, self.obj)
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
