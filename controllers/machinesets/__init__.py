"""Cluster API core's MachineDeployment and MachineSet controllers, for the embedded mode.

A MachineDeployment keeps one MachineSet per distinct Machine template (named ``<deployment>-<5
characters>``, labelled ``machine-template-hash: <template hash>-<the same 5>`` and
``cluster.x-k8s.io/deployment-name``, controlled by the deployment) and moves Machines from the old sets to
the new one: with ``RollingUpdate`` never more than ``replicas + maxSurge`` Machines wanted at once and
never fewer than ``replicas - maxUnavailable`` available, as a Kubernetes Deployment rolls out; with
``OnDelete`` a new Machine only once an old one has been deleted by hand. Old sets scaled to zero are kept
up to ``revisionHistoryLimit``.

A MachineSet keeps ``replicas`` Machines (``<set>-<5 characters>``, labelled with the template's labels,
``cluster.x-k8s.io/set-name``, the deployment's name and ``cluster.x-k8s.io/cluster-name``, controlled by
the set). Each Machine gets its own infrastructure object cloned from the template its
``spec.infrastructureRef`` names: an object of the templated kind, named after the Machine, whose spec is
the template's ``spec.template.spec``, with the template's ``spec.template.metadata`` labels and annotations
and ``cluster.x-k8s.io/cloned-from-name``/``cloned-from-groupkind``; the set owns the clone until the
Machine controller takes it over. Scaling down deletes, first, Machines already being deleted, then those
annotated ``cluster.x-k8s.io/delete-machine``, then failed or not-ready ones, then by ``deletePolicy``
(``Random``, ``Newest``, ``Oldest``; ``Random`` by name among equals, as Cluster API core orders them).

The 5 characters look random but are not: a set's come from its deployment's uid and template hash, a
Machine's from its set's uid and the first slot (0, 1, ...) no Machine of the set holds. So a reconciler
reading a view that lags behind the store (an informer not yet caught up, a second process reconciling the
same store) asks for the names another already took and is refused (``AlreadyExists``) instead of making
surplus sets and Machines: it takes the set, or the Machine, for its own. A Machine's infrastructure clone
is named like the Machine and created first; one left without its Machine (the process died between the
two writes) is taken by the next reconcile of that slot rather than left behind.

Nothing is changed while the Cluster is paused (``spec.paused`` or the ``cluster.x-k8s.io/paused``
annotation) or the object itself carries the paused annotation; a MachineDeployment with ``spec.paused`` has
its status kept but its MachineSets left as they are. Deleting a MachineDeployment deletes its MachineSets,
and deleting a MachineSet its Machines (whose infrastructure the Machine controller deletes), each held by a
finalizer until its dependents are gone.
"""

from __future__ import annotations

from capa_py.store.protocol import ObjectStore
from controllers.machinesets.clones import TemplateError, clone_from_template, cloned_kinds, templated_kind
from controllers.machinesets.machinedeployment import AVAILABLE, MachineDeploymentController
from controllers.machinesets.machineset import (
    MACHINES_CREATED,
    MACHINES_READY,
    WAIT_FOR_CLUSTER,
    WAIT_FOR_DELETION,
    MachineSetController,
)
from controllers.machinesets.naming import (
    controlled_by,
    controller_of,
    derived_suffix,
    free_machine_names,
    label_value,
)
from controllers.machinesets.ordering import deletion_order, machine_available, machine_failed, machine_ready

__all__ = [
    "AVAILABLE",
    "MACHINES_CREATED",
    "MACHINES_READY",
    "WAIT_FOR_CLUSTER",
    "WAIT_FOR_DELETION",
    "MachineDeploymentController",
    "MachineSetController",
    "TemplateError",
    "clone_from_template",
    "cloned_kinds",
    "controlled_by",
    "controller_of",
    "deletion_order",
    "derived_suffix",
    "free_machine_names",
    "label_value",
    "machine_available",
    "machine_failed",
    "machine_ready",
    "machine_set_controllers",
    "templated_kind",
]


def machine_set_controllers(store: ObjectStore) -> list[MachineDeploymentController | MachineSetController]:
    """The MachineDeployment and MachineSet controllers over ``store``."""
    return [MachineDeploymentController(store), MachineSetController(store)]
