"""The controllers: Cluster API core (Cluster, Machine) and the AWS infrastructure (AWSCluster, AWSMachine).

:func:`aws_controllers` builds the set ``capa apply`` runs in-process and a management-cluster deployment
runs for good.
"""

from __future__ import annotations

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.manager import Controller
from capa_py.store.protocol import ObjectStore


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
