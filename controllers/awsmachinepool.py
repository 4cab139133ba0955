"""The AWSMachinePool controller: an Auto Scaling group over a launch template, per machine pool.

Thin, as the AWSMachine controller: fetch, pause, finalizer, then the create pass or the delete pass of
:mod:`controllers.services.machinepool`. It waits for what the pool needs of the cluster (its subnets and
node security groups recorded by the AWSCluster) and for the MachinePool's bootstrap data secret; a pool
with neither ``awsLaunchTemplate.ami.id`` nor a Kubernetes version to look an image up by is refused
(``MissingAMI``) before anything is built. Delete: the group (ForceDelete, waited for until AWS no longer
reports it), then the launch template, then the finalizer.
"""

from __future__ import annotations

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import Cluster
from capa_py.api.machinepool import AWSMACHINEPOOL_FINALIZER, AWSMachinePool, MachinePool
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result
from capa_py.engine.recorder import StatusRecorder
from capa_py.runtime.queue import ObjectKey
from controllers.aws_scope import Step
from controllers.identity import WATCHED_KINDS as IDENTITY_WATCHED_KINDS
from controllers.infrastructure import (
    AWSInfrastructureController,
    InfrastructureKind,
    Prepared,
    create_pass,
    missing_infrastructure,
)
from controllers.services import images, machinepool
from controllers.services.machinepool import ASG_READY, LAUNCH_TEMPLATE_READY, PoolScope

CREATE: Action = Sequential(
    Step("ReconcileLaunchTemplate", machinepool.reconcile_launch_template, LAUNCH_TEMPLATE_READY),
    Step(
        "ReconcileLaunchTemplateVersion", machinepool.reconcile_launch_template_version, LAUNCH_TEMPLATE_READY
    ),
    Step("ReconcileAutoScalingGroup", machinepool.reconcile_group, ASG_READY),
    Step("MarkReady", machinepool.mark_ready),
    Step("ReconcileInstanceRefresh", machinepool.reconcile_instance_refresh),
)
"""One create pass of an AWSMachinePool, over its :class:`PoolScope`."""

DELETE: Action = Sequential(
    Step("DeleteAutoScalingGroup", machinepool.delete_group),
    Step("DeleteLaunchTemplate", machinepool.delete_launch_template),
)
"""One delete pass: the group and its instances, waited for, then the template and its versions."""


POOL_KIND: InfrastructureKind[AWSMachinePool, MachinePool] = InfrastructureKind(
    kind=AWSMachinePool,
    owner_kind=MachinePool,
    finalizer=AWSMACHINEPOOL_FINALIZER,
    condition=ASG_READY,
    cluster_name=lambda p: p.spec.cluster_name,
    has_image=lambda obj, p: bool(obj.spec.aws_launch_template.ami.id or p.spec.template.spec.version),
    missing_infrastructure=lambda awscluster, p: missing_infrastructure(awscluster, control_plane=False),
    additional_tags=lambda obj: obj.spec.additional_tags,
    secret_name=lambda p: p.spec.template.spec.bootstrap.data_secret_name,
    infrastructure_ref=lambda p: p.spec.template.spec.infrastructure_ref,
    unnamed_secret="the machine pool has no bootstrap data secret",
    no_image=images.NO_VERSION_MESSAGE,
    delete=DELETE,
    deleting="deleting the Auto Scaling group",
)
"""What sets AWSMachinePool apart in the infrastructure controllers' shared passes."""


class AWSMachinePoolController(AWSInfrastructureController):
    name = "awsmachinepool"
    kind = AWSMachinePool
    watched_kinds: tuple[type[KubeObject], ...] = (MachinePool, AWSCluster, Cluster, *IDENTITY_WATCHED_KINDS)
    status_kinds = (AWSCluster,)
    infrastructure = POOL_KIND

    def create(self, key: ObjectKey, ready: Prepared[AWSMachinePool, MachinePool]) -> Result:
        scope = PoolScope(
            self.store,
            StatusRecorder(self.store, ready.obj),
            self.engine,
            ready.aws,
            ready.cluster.name,
            ready.additional_tags,
            events=self.events,
            machine_pool=ready.owner,
            awscluster=ready.awscluster,
            bootstrap=ready.bootstrap,
        )
        return create_pass(self, key, scope, CREATE, machinepool.CONDITIONS)
