"""The Tinkerbell workflow controller: prepares Workflows, supervises their timeouts, cancels on deletion.

Preparation (a new workflow, or a ``Pending`` one that has not started): the finalizer goes on first, so
that a deletion is always seen; the Hardware and the Template are resolved (their namespace defaults to
the workflow's; a missing one is ``Prepared=False`` with reason ``HardwareNotFound``/``TemplateNotFound``,
retried when it appears — Hardware and Template events wake the workflows naming them); the template is
rendered (:mod:`capa_py.tinkerbell.prepare`) into ``status.actions``; the workflow is ``Pending`` and
``Prepared=True``. A render error fails it (``RenderFailed``, the Go-style message). A prepared workflow
that has not started is rendered again when its spec, template or hardware changes; a workflow that
failed to render is prepared again when its spec is edited (it never ran).

Supervision (the rules live in :mod:`capa_py.tinkerbell.states`): ``Scheduled`` longer than the scheduling
timeout (from ``status.lastTransitionTime``) fails with ``SchedulingTimeout``; ``Running`` longer than
``spec.timeout`` seconds (from ``status.startedAt``; 0 is none) fails with ``Timeout``; an action running
longer than its ``timeout`` (0 or unset: the controller's default) fails it and the workflow with
``Timeout``; ``Cancelling`` longer than the cancel timeout is forced to ``Canceled`` with reason
``CancelTimeout``. Time comes from an injectable clock; a reconcile asks to be requeued when the nearest
deadline is due, never sleeps.

Both are ctrlkit graphs (:class:`Preparation`, :class:`Supervision`; ``capa ctrlkit graph
controllers.tinkerbell:preparation_graph`` and ``…:supervision_graph`` draw them).

Deletion cancels: ``Pending`` (or unprepared) → ``Canceled`` at once; ``Scheduled``/``Running`` →
``Cancelling`` (the gRPC server tells the agent). The finalizer is removed once the workflow is in an end
state (``Succeeded``, ``Failed``, ``Canceled``), whether deleted or not, so a deleted workflow goes away
when it reaches one. Every transition is also a Kubernetes Event on the workflow (``Prepared``,
``RenderFailed``, ``Canceled``, ...), which outlives the deleted object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.meta import KubeObject, ObjectMeta, utcnow
from capa_py.api.tinkerbell import (
    END_STATES,
    WORKFLOW_FINALIZER,
    Hardware,
    LocalObjectReference,
    Template,
    Workflow,
    WorkflowSpec,
)
from capa_py.api.tinkerbell_capi import TinkerbellMachine
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import fetch, pause_reason, remove_finalizer, settle
from controllers.tinkerbell_preparation import (
    HARDWARE_NOT_FOUND,
    PREPARED,
    TEMPLATE_NOT_FOUND,
    Preparation,
    preparable,
    ref_namespace,
)
from controllers.tinkerbell_supervision import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_CANCEL_TIMEOUT,
    DEFAULT_SCHEDULING_TIMEOUT,
    Deadline,
    Supervision,
    WorkflowTimeouts,
    deadlines,
    supervision_view,
)

Clock = Callable[[], datetime]
_log = get_logger("controller.workflow")


@dataclass
class WorkflowController:
    """Reconciles Workflows (see the module docstring)."""

    store: ObjectStore
    events: EventRecorder | None = None
    timeouts: WorkflowTimeouts = field(default_factory=WorkflowTimeouts)
    clock: Clock = utcnow

    name = "workflow"
    kind = Workflow
    # Its own kind too: the gRPC server's status writes (Scheduled, Running, an action starting) start
    # the clocks the supervisor keeps.
    watched_kinds = (Hardware, Template, Workflow)
    status_kinds = (Workflow,)

    def __post_init__(self) -> None:
        if self.events is None:
            self.events = EventRecorder(self.store)
        self.views = {"Workflow": supervision_view}

    @property
    def recorder(self) -> EventRecorder:
        assert self.events is not None
        return self.events

    def _paused(self, workflow: Workflow) -> str | None:
        return _paused_cluster(self.store, workflow)

    # -- events -------------------------------------------------------------------------------------
    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj: KubeObject = event.object
        if isinstance(obj, Workflow):
            return (
                []
                if event.type == "DELETED"
                else [ObjectKey("Workflow", obj.metadata.namespace or "", obj.name)]
            )
        if isinstance(obj, Hardware | Template):
            return list(self._referrers(obj))
        return []

    def _referrers(self, obj: Hardware | Template) -> Iterable[ObjectKey]:
        """The workflows naming ``obj`` that are not running yet (only those read it)."""
        for workflow in self.store.list(Workflow):
            ref = workflow.spec.hardware_ref if isinstance(obj, Hardware) else workflow.spec.template_ref
            if ref.name != obj.name or ref_namespace(ref, workflow) != (obj.metadata.namespace or "default"):
                continue
            if workflow.status.state in (None, "Pending"):
                yield ObjectKey("Workflow", workflow.metadata.namespace or "", workflow.name)

    # -- reconcile ----------------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        workflow = fetch(self.store, Workflow, key)
        if workflow is None:
            return no_requeue()
        now = self.clock()
        if workflow.being_deleted and WORKFLOW_FINALIZER not in workflow.metadata.finalizers:
            return no_requeue()  # nothing of ours holds it: it is going
        if not workflow.being_deleted and preparable(workflow):
            paused = self._paused(workflow)
            if paused is not None:
                # Cluster API's pause covers what its provider made for the cluster's machines: a workflow
                # `capa move` has just created on the target, its status not restored yet, is not new work.
                _log.debug("workflow not prepared: paused", workflow=workflow.ref(), reason=paused)
                return no_requeue()
            preparation = Preparation(self, workflow, now)
            result = preparation.run()
            settle(self, key, preparation.workflow)
            if preparation.workflow.status.state in END_STATES:
                remove_finalizer(self.store, preparation.workflow, WORKFLOW_FINALIZER)
            return result
        supervision = Supervision(self, workflow, now)
        result = supervision.run()
        settle(self, key, supervision.workflow)
        return result


def _paused_cluster(store: ObjectStore, workflow: Workflow) -> str | None:
    """Why a workflow made for a Cluster API machine (owned by a TinkerbellMachine) must not be prepared:
    its machine's cluster is paused (or it carries the paused annotation itself); None otherwise, and for a
    workflow no machine owns."""
    owner = next((r for r in workflow.metadata.owner_references if r.kind == TinkerbellMachine.KIND), None)
    if owner is None:
        return None
    namespace = workflow.metadata.namespace
    machine = get_or_none(store, TinkerbellMachine, owner.name, namespace)
    cluster_name = machine.metadata.labels.get(CLUSTER_NAME_LABEL) if machine is not None else None
    cluster = get_or_none(store, Cluster, cluster_name, namespace) if cluster_name else None
    return pause_reason(workflow, cluster)


def _drawable(phase: type[Preparation] | type[Supervision]) -> Action:
    """A phase's ctrlkit graph built as a reconcile builds it, over an example workflow and a store that
    is never touched."""
    from typing import cast

    nowhere = cast(ObjectStore, None)
    workflow = Workflow(
        metadata=ObjectMeta(name="example"),
        spec=WorkflowSpec(
            hardware_ref=LocalObjectReference(name="example"),
            template_ref=LocalObjectReference(name="example"),
        ),
    )
    controller = WorkflowController(nowhere, EventRecorder(nowhere))
    return phase(controller, workflow, utcnow()).workflow_graph()


def preparation_graph() -> Action:
    """The preparation's ctrlkit graph (``capa ctrlkit graph controllers.tinkerbell:preparation_graph``)."""
    return _drawable(Preparation)


def supervision_graph() -> Action:
    """The supervision's ctrlkit graph (``capa ctrlkit graph controllers.tinkerbell:supervision_graph``)."""
    return _drawable(Supervision)


def tinkerbell_controllers(
    store: ObjectStore,
    events: EventRecorder | None = None,
    timeouts: WorkflowTimeouts | None = None,
    clock: Clock = utcnow,
) -> list[WorkflowController]:
    """The Tinkerbell controllers ``capa controller`` and ``capa apply`` run."""
    return [WorkflowController(store, events, timeouts or WorkflowTimeouts(), clock)]


__all__ = [
    "DEFAULT_ACTION_TIMEOUT",
    "DEFAULT_CANCEL_TIMEOUT",
    "DEFAULT_SCHEDULING_TIMEOUT",
    "HARDWARE_NOT_FOUND",
    "PREPARED",
    "TEMPLATE_NOT_FOUND",
    "Deadline",
    "Preparation",
    "Supervision",
    "WorkflowController",
    "WorkflowTimeouts",
    "deadlines",
    "preparation_graph",
    "supervision_graph",
    "supervision_view",
    "tinkerbell_controllers",
]
