"""The controllers: Cluster API core (Cluster, Machine, MachineDeployment, MachineSet, MachinePool), the
AWS infrastructure (AWSCluster, AWSMachine, AWSMachinePool), Tinkerbell (Workflow) and the bare-metal
infrastructure (TinkerbellCluster, TinkerbellMachine).

:func:`embedded_controllers` builds the set ``capa apply`` runs in-process and a management-cluster
deployment runs for good: :func:`aws_controllers` (when AWS is at hand), the Tinkerbell controllers and
the bare-metal provider's, with Cluster API core's Cluster and Machine controllers taking either provider's
kinds (a Cluster points at an AWSCluster or a TinkerbellCluster).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.machinepool import AWSMachinePool
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import TINKERBELL_API_VERSION
from capa_py.api.tinkerbell_capi import TINKERBELL_CAPI_KINDS, TinkerbellCluster, TinkerbellMachine
from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.manager import Controller
from capa_py.store.protocol import ObjectStore

if TYPE_CHECKING:
    from controllers.tinkerbell import WorkflowTimeouts


def aws_controllers(
    store: ObjectStore, pool: ClientPool, engine: Engine, events: EventRecorder | None = None
) -> list[Controller]:
    """``events``: where the AWS controllers record Kubernetes Events (one recorder over ``store`` when
    not given)."""
    from controllers.awscluster import AWSClusterController
    from controllers.awsmachine import AWSMachineController
    from controllers.awsmachinepool import AWSMachinePoolController
    from controllers.core import ClusterController, MachineController
    from controllers.core_machinepool import MachinePoolController
    from controllers.identity import Identities

    recorder = events if events is not None else EventRecorder(store)
    # One pool per identity, shared by a cluster's controllers.
    identities = Identities(store, pool)
    return [
        ClusterController(store, infrastructure_kinds=(AWSCluster,)),
        MachineController(store, infrastructure_kinds=(AWSMachine,)),
        MachinePoolController(store, infrastructure_kinds=(AWSMachinePool,)),
        AWSClusterController(store, pool, engine, recorder, identities),
        AWSMachineController(store, pool, engine, recorder, identities),
        AWSMachinePoolController(store, pool, engine, recorder, identities),
    ]


def _stored(obj: KubeObject, store: ObjectStore | None) -> KubeObject:
    if store is None:
        return obj
    from capa_py.store.helpers import get_or_none

    found = get_or_none(store, type(obj), obj.metadata.name, obj.metadata.namespace)
    return found if found is not None else obj


def _bare_metal(obj: KubeObject) -> bool:
    """A Cluster or Machine whose infrastructure is a Tinkerbell kind, or a MachineDeployment or MachineSet
    whose Machines' is (a Tinkerbell machine template)."""
    kinds = {k.KIND for k in TINKERBELL_CAPI_KINDS}
    if isinstance(obj, MachineDeployment | MachineSet):
        return obj.spec.template.spec.infrastructure_ref.kind in kinds
    ref = getattr(getattr(obj, "spec", None), "infrastructure_ref", None)
    return isinstance(obj, Cluster | Machine) and ref is not None and ref.kind in kinds


def needs_aws(objects: Iterable[KubeObject], store: ObjectStore | None = None) -> bool:
    """Whether reconciling ``objects`` may need AWS: anything may but Tinkerbell objects, the bare-metal
    provider's, Clusters and Machines pointing at them, and the bootstrap Secrets of those Machines.
    With a ``store``, an object named by kind and name only (``capa delete machine NAME``) is judged by
    its stored copy."""
    given = [_stored(o, store) for o in objects]
    bare_secrets = {
        (o.metadata.namespace, o.spec.bootstrap.data_secret_name)
        for o in given
        if isinstance(o, Machine) and _bare_metal(o)
    } | {
        (o.metadata.namespace, o.spec.template.spec.bootstrap.data_secret_name)
        for o in given
        if isinstance(o, MachineDeployment | MachineSet) and _bare_metal(o)
    }
    return any(
        not (
            o.API_VERSION == TINKERBELL_API_VERSION
            or isinstance(o, TINKERBELL_CAPI_KINDS)
            or _bare_metal(o)
            or (isinstance(o, Secret) and (o.metadata.namespace, o.name) in bare_secrets)
        )
        for o in given
    )


def embedded_controllers(
    store: ObjectStore,
    pool: ClientPool | None,
    engine: Engine | None,
    events: EventRecorder | None = None,
    workflow_timeouts: WorkflowTimeouts | None = None,
    tinkerbell: bool = True,
) -> list[Controller]:
    """Cluster API core's controllers over both providers' kinds, the AWS controllers (only with a ``pool``
    and an ``engine``), the Tinkerbell controllers and the bare-metal provider's (unless ``tinkerbell`` is
    false)."""
    from controllers.core import ClusterController, MachineController
    from controllers.machinesets import machine_set_controllers
    from controllers.tinkerbell import tinkerbell_controllers
    from controllers.tinkerbell_capi import tinkerbell_capi_controllers

    recorder = events if events is not None else EventRecorder(store)
    built: list[Controller] = [
        ClusterController(store, infrastructure_kinds=(AWSCluster, TinkerbellCluster)),
        MachineController(store, infrastructure_kinds=(AWSMachine, TinkerbellMachine)),
        *machine_set_controllers(store),
    ]
    if pool is not None and engine is not None:
        built += [c for c in aws_controllers(store, pool, engine, recorder) if c.name not in _CORE_NAMES]
    if tinkerbell:
        built += tinkerbell_controllers(store, recorder, workflow_timeouts)
        built += tinkerbell_capi_controllers(store, recorder)
    return built


_CORE_NAMES = frozenset({"cluster", "machine", "machinedeployment", "machineset"})
"""Cluster API core's controllers that :func:`embedded_controllers` builds over both providers' kinds (the
MachinePool controller comes with the AWS controllers: only AWS has machine pools)."""
