"""The controllers: Cluster API core (Cluster, Machine), the AWS infrastructure (AWSCluster, AWSMachine)
and Tinkerbell (Workflow).

:func:`embedded_controllers` builds the set ``capa apply`` runs in-process and a management-cluster
deployment runs for good: :func:`aws_controllers` (when AWS is at hand) and the Tinkerbell controllers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import TINKERBELL_API_VERSION
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
    from controllers.core import ClusterController, MachineController

    recorder = events if events is not None else EventRecorder(store)
    return [
        ClusterController(store, infrastructure_kinds=(AWSCluster,)),
        MachineController(store, infrastructure_kinds=(AWSMachine,)),
        AWSClusterController(store, pool, engine, recorder),
        AWSMachineController(store, pool, engine, recorder),
    ]


def needs_aws(objects: Iterable[KubeObject]) -> bool:
    """Whether reconciling ``objects`` may need AWS: anything but Tinkerbell objects may."""
    return any(o.API_VERSION != TINKERBELL_API_VERSION for o in objects)


def embedded_controllers(
    store: ObjectStore,
    pool: ClientPool | None,
    engine: Engine | None,
    events: EventRecorder | None = None,
    workflow_timeouts: WorkflowTimeouts | None = None,
) -> list[Controller]:
    """The AWS controllers (only with a ``pool`` and an ``engine``) and the Tinkerbell controllers."""
    from controllers.tinkerbell import tinkerbell_controllers

    recorder = events if events is not None else EventRecorder(store)
    built: list[Controller] = []
    if pool is not None and engine is not None:
        built += aws_controllers(store, pool, engine, recorder)
    built += tinkerbell_controllers(store, recorder, workflow_timeouts)
    return built
