"""The AWSMachine controller: one EC2 instance per machine, registered with the API load balancer.

It waits for what its instance needs of the cluster — the subnets and security groups the AWSCluster
records in ``status.network`` as soon as they exist, not the whole cluster being ready (NAT gateways and
the load balancer may still be pending) — and for the bootstrap data secret, then runs the instance
through the engine — tags on create, and on AWS a client token from the object's uid — so the instance id
is recorded in status the moment ``RunInstances`` returns, never in a deferred patch. Control-plane
machines are registered with the API server target group once its ARN is recorded (the load balancer may
still be provisioning). Addresses, ``providerID`` and ``instanceState`` go to status; ``InstanceReady``
says where it stands, and a pending instance is polled at the InstanceRunning waiter's cadence. Delete
deregisters, terminates, waits until the instance is gone, then drops the finalizer.

The bootstrap data is stored in AWS Secrets Manager before the instance is launched, and the instance
gets a script that fetches it; the secrets are deleted once the instance runs and when the machine is
deleted (:mod:`controllers.services.bootstrap`; ``spec.cloudInit.insecureSkipSecretsManager`` puts the data
in the user data instead).

The instance's image is ``spec.ami.id``, else the newest AMI found for the Machine's ``spec.version``
(:mod:`controllers.services.images`); a machine with neither is refused (``MissingAMI``) before anything of
it is built.
"""

from __future__ import annotations

from capa_py.api.aws import AWSMACHINE_FINALIZER, AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result
from capa_py.engine.recorder import StatusRecorder
from capa_py.runtime.queue import ObjectKey
from controllers.aws_scope import ReconcileScope, Step
from controllers.identity import WATCHED_KINDS as IDENTITY_WATCHED_KINDS
from controllers.infrastructure import (
    AWSInfrastructureController,
    InfrastructureKind,
    Prepared,
    create_pass,
    missing_infrastructure,
)
from controllers.services import bootstrap, ignition, images, instances
from controllers.services.instances import INSTANCE_READY, LB_ATTACHED, MachineScope

CREATE: Action = Sequential(
    Step("StoreBootstrapData", bootstrap.store_bootstrap_data, INSTANCE_READY, condition_on_success=False),
    Step("ReconcileInstance", instances.reconcile_instance, INSTANCE_READY),
    Step("RegisterWithLoadBalancer", instances.register_with_load_balancer, LB_ATTACHED),
    Step("MarkReady", instances.mark_ready),
    Step("DeleteBootstrapData", bootstrap.delete_bootstrap_data),
    Step("DeleteIgnitionDataOnceJoined", ignition.delete_when_joined),
)
"""One create pass of an AWSMachine, run over its :class:`MachineScope`: the bootstrap data stored in
Secrets Manager, the instance launched with the script that fetches it, and, once the instance runs, the
secrets deleted."""

DELETE: Action = Sequential(
    Step("DeleteBootstrapData", bootstrap.delete_bootstrap_data),
    Step("DeleteIgnitionData", ignition.delete_ignition_data),
    Step("DeregisterFromLoadBalancer", instances.deregister),
    Step("TerminateInstance", instances.terminate),
)
"""One delete pass: the bootstrap data's secrets deleted (if any are left), and its Ignition object, out of
the target group, then the instance terminated and waited for."""


def _refusal(obj: AWSMachine, awscluster: AWSCluster, secret: Secret) -> tuple[str, str] | None:
    """Ignition data for the cluster's object store, and the cluster names no bucket: nothing is built."""
    missing = ignition.missing_bucket(obj, awscluster, ignition.bootstrap_format(secret))
    return ("MissingS3Bucket", missing) if missing is not None else None


def _delete_scope(
    base: ReconcileScope[AWSMachine], machine: Machine | None, awscluster: object
) -> ReconcileScope[AWSMachine]:
    """The delete pass's scope, with where the machine's Ignition data may be."""
    return ignition.MachineDeleteScope(
        base.store,
        base.recorder,
        base.engine,
        base.aws,
        base.cluster_name,
        events=base.events,
        ignition=ignition.objects_of(base.store, base.obj, machine, awscluster),
    )


MACHINE_KIND: InfrastructureKind[AWSMachine, Machine] = InfrastructureKind(
    kind=AWSMachine,
    owner_kind=Machine,
    finalizer=AWSMACHINE_FINALIZER,
    condition=INSTANCE_READY,
    cluster_name=lambda m: m.spec.cluster_name,
    has_image=lambda obj, m: bool(obj.spec.ami.id or m.spec.version),
    missing_infrastructure=lambda awscluster, m: missing_infrastructure(awscluster, m.is_control_plane),
    additional_tags=lambda obj: obj.spec.additional_tags,
    secret_name=lambda m: m.spec.bootstrap.data_secret_name,
    infrastructure_ref=lambda m: m.spec.infrastructure_ref,
    unnamed_secret="the machine has no bootstrap data secret yet",
    no_image=images.NO_VERSION_MESSAGE,
    delete=DELETE,
    deleting="terminating the instance",
    refusal=_refusal,
    delete_scope=_delete_scope,
)
"""What sets AWSMachine apart in the infrastructure controllers' shared passes."""


class AWSMachineController(AWSInfrastructureController):
    name = "awsmachine"
    kind = AWSMachine
    watched_kinds: tuple[type[KubeObject], ...] = (Machine, AWSCluster, Cluster, *IDENTITY_WATCHED_KINDS)
    status_kinds = (AWSCluster,)
    infrastructure = MACHINE_KIND

    def create(self, key: ObjectKey, ready: Prepared[AWSMachine, Machine]) -> Result:
        scope = MachineScope(
            self.store,
            StatusRecorder(self.store, ready.obj),
            self.engine,
            ready.aws,
            ready.cluster.name,
            ready.additional_tags,
            events=self.events,
            machine=ready.owner,
            awscluster=ready.awscluster,
            bootstrap=ready.bootstrap,
            bootstrap_format=ignition.bootstrap_format(ready.bootstrap_secret),
        )
        return create_pass(self, key, scope, CREATE, instances.CONDITIONS)
