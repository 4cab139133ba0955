"""The preparation of a Tinkerbell Workflow: finalizer, Hardware and Template resolved, the template rendered
into ``status.actions`` (the rules are described in :mod:`controllers.tinkerbell`)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, TypeVar

from capa_py.api.conditions import READY, set_condition
from capa_py.api.tinkerbell import (
    WORKFLOW_FINALIZER,
    ActionStatus,
    Hardware,
    LocalObjectReference,
    Template,
    Workflow,
)
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import Join, Sequential
from capa_py.ctrlkit.result import Result, exit_workflow, ignore_exit
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.store.errors import Conflict
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell import states
from capa_py.tinkerbell.prepare import RENDER_FAILED, RenderFailed, render_workflow_actions
from controllers.base import add_finalizer, patch_status

PREPARED = "Prepared"
HARDWARE_NOT_FOUND = "HardwareNotFound"
TEMPLATE_NOT_FOUND = "TemplateNotFound"
EVENT_PREPARED = "Prepared"

_log = get_logger("controller.workflow")

_Ref = TypeVar("_Ref", Hardware, Template)


class PreparingController(Protocol):
    """What a preparation uses of the workflow controller."""

    store: ObjectStore

    @property
    def recorder(self) -> EventRecorder: ...


def ref_namespace(ref: LocalObjectReference, workflow: Workflow) -> str:
    """The namespace of the Hardware or Template ``ref`` names: its own, else the workflow's."""
    return ref.namespace or workflow.metadata.namespace or "default"


class Preparation:
    """One preparation of one workflow, as ctrlkit actions: finalizer, references, render, record."""

    def __init__(self, controller: PreparingController, workflow: Workflow, now: datetime) -> None:
        self.controller = controller
        self.store = controller.store
        self.workflow = workflow
        self.now = now
        self.hardware: Hardware | None = None
        self.template: Template | None = None
        self.missing: list[tuple[str, str]] = []

    def add_finalizer(self, ctx: Context) -> Result | None:
        self.workflow = add_finalizer(self.store, self.workflow, WORKFLOW_FINALIZER)
        return None

    def resolve_hardware(self, ctx: Context) -> Result | None:
        self.hardware = self._resolve(
            Hardware, self.workflow.spec.hardware_ref, "hardwareRef", HARDWARE_NOT_FOUND
        )
        return None

    def resolve_template(self, ctx: Context) -> Result | None:
        self.template = self._resolve(
            Template, self.workflow.spec.template_ref, "templateRef", TEMPLATE_NOT_FOUND
        )
        return None

    def _resolve(self, kind: type[_Ref], ref: LocalObjectReference, field: str, reason: str) -> _Ref | None:
        """The object ``spec.<field>`` names, or None with ``reason`` recorded as missing."""
        namespace = ref_namespace(ref, self.workflow)
        found = get_or_none(self.store, kind, ref.name, namespace)
        if found is None:
            what = f"{kind.KIND.lower()} {namespace}/{ref.name} (spec.{field}) does not exist"
            self.missing.append((reason, what))
        return found

    def wait_for_references(self, ctx: Context) -> Result | None:
        if not self.missing:
            return None
        reason = self.missing[0][0]
        message = "; ".join(m for _, m in self.missing)

        def waiting(w: Workflow) -> None:
            _still_preparable(w)
            w.status.observed_generation = w.metadata.generation
            set_condition(w.status, PREPARED, False, reason, message, "Warning")
            set_condition(w.status, READY, False, reason, message, "Warning")

        before = self.workflow
        self.workflow = patch_status(self.store, self.workflow, waiting)
        if self.workflow is not before:
            self.controller.recorder.warning(self.workflow, reason, message)
        # Not a failure: the Hardware or Template event wakes the workflow when it appears.
        return exit_workflow(reason)

    def render(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        assert self.template is not None
        workflow = self.workflow
        try:
            actions = render_workflow_actions(self.template, self.hardware, workflow.spec.template_data)
        except RenderFailed as exc:
            message = str(exc)

            def render_failed(w: Workflow) -> None:
                _still_preparable(w)
                w.status.actions = {}
                w.status.current_action = None
                w.status.observed_generation = w.metadata.generation
                states.set_state(w, "Failed", self.now, RENDER_FAILED, message)
                set_condition(w.status, PREPARED, False, RENDER_FAILED, message, "Error")
                set_condition(w.status, READY, False, RENDER_FAILED, message, "Error")

            self.workflow = patch_status(self.store, workflow, render_failed)
            self.controller.recorder.warning(self.workflow, RENDER_FAILED, message)
            _log.info("workflow render failed", workflow=workflow.ref(), field=exc.field)
            return exit_workflow(RENDER_FAILED)
        rendered = {
            action.name: ActionStatus(rendered=action, index=index) for index, action in enumerate(actions)
        }
        first = workflow.status.state is None
        template_name = self.template.name
        hardware_name = self.hardware.name

        def prepared(w: Workflow) -> None:
            _still_preparable(w)
            w.status.actions = {name: status.model_copy(deep=True) for name, status in rendered.items()}
            w.status.current_action = None
            w.status.observed_generation = w.metadata.generation
            states.set_state(w, "Pending", self.now)
            set_condition(w.status, PREPARED, True)
            set_condition(w.status, READY, True)

        before = self.workflow
        self.workflow = patch_status(self.store, workflow, prepared)
        if self.workflow is not before:
            verb = "rendered" if first else "rendered again"
            self.controller.recorder.normal(
                self.workflow,
                EVENT_PREPARED,
                f"{verb} {len(actions)} actions from template {template_name} for hardware {hardware_name}",
            )
            _log.info("workflow prepared", workflow=workflow.ref(), actions=len(actions), again=not first)
        return None

    def workflow_graph(self) -> Action:
        return Sequential(
            wrap_action("AddFinalizer", self.add_finalizer),
            Join(
                wrap_action("ResolveHardware", self.resolve_hardware),
                wrap_action("ResolveTemplate", self.resolve_template),
            ),
            wrap_action("WaitForReferences", self.wait_for_references),
            wrap_action("RenderActions", self.render),
        )

    def run(self) -> Result:
        return ignore_exit(self.workflow_graph().run(Context()))


def preparable(workflow: Workflow) -> bool:
    """Whether the workflow is (re)prepared: it is new, ``Pending`` and not started, or failed to render
    a spec it no longer has (its spec was edited since: it never ran, so the new spec is rendered)."""
    status = workflow.status
    if status.state is None or (status.state == "Pending" and not workflow.started):
        return True
    return (
        status.state == "Failed"
        and status.reason == RENDER_FAILED
        and status.observed_generation != workflow.metadata.generation
    )


def _still_preparable(workflow: Workflow) -> None:
    """A preparation's write applies only to a workflow nobody has scheduled meanwhile (a write re-applied
    after a conflict sees the fresh copy): Conflict otherwise, and the next reconcile looks again."""
    if not preparable(workflow):
        raise Conflict(f"{workflow.ref()} became {workflow.status.state} while being prepared")
