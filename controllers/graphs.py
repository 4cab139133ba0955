"""The controllers' reconcile workflows as ctrlkit graphs, for readers:

    capa ctrlkit graph controllers.graphs:awscluster_create
    capa ctrlkit graph controllers.graphs:awscluster_delete --format dot
    capa ctrlkit graph controllers.graphs:awsmachine_create

The workflows are built exactly as a reconcile builds them, over a scope that is never run (no store, no
AWS clients are touched while drawing).
"""

from __future__ import annotations

from typing import Any, cast

from capa_py.api.aws import AWSCluster, AWSClusterSpec, AWSMachine, AWSMachineSpec
from capa_py.api.cluster import Machine, MachineSpec
from capa_py.api.meta import ObjectMeta, ObjectReference
from capa_py.aws.session import AWSClients
from capa_py.ctrlkit.action import Action
from capa_py.engine.engine import Engine
from capa_py.engine.recorder import StatusRecorder
from capa_py.store.protocol import ObjectStore
from controllers.aws_scope import ReconcileScope
from controllers.awscluster import ClusterReconcile
from controllers.awsmachine import MachineReconcile

_NOWHERE = cast(Any, None)


def _cluster_scope() -> ReconcileScope[AWSCluster]:
    obj = AWSCluster(metadata=ObjectMeta(name="example", uid="0"), spec=AWSClusterSpec(region="us-east-1"))
    store = cast(ObjectStore, _NOWHERE)
    return ReconcileScope(store, StatusRecorder(store, obj), Engine(), cast(AWSClients, _NOWHERE), "example")


def awscluster_create() -> Action:
    return ClusterReconcile(_cluster_scope()).create_workflow()


def awscluster_delete() -> Action:
    return ClusterReconcile(_cluster_scope()).delete_workflow()


def awsmachine_create() -> Action:
    obj = AWSMachine(
        metadata=ObjectMeta(name="example", uid="0"), spec=AWSMachineSpec(instance_type="t3.medium")
    )
    machine = Machine(
        metadata=ObjectMeta(name="example"),
        spec=MachineSpec(cluster_name="example", infrastructure_ref=ObjectReference(kind="AWSMachine")),
    )
    cluster = AWSCluster(metadata=ObjectMeta(name="example"), spec=AWSClusterSpec(region="us-east-1"))
    store = cast(ObjectStore, _NOWHERE)
    scope = ReconcileScope(store, StatusRecorder(store, obj), Engine(), cast(AWSClients, _NOWHERE), "example")
    return MachineReconcile(scope, machine, cluster, b"").create_workflow()
