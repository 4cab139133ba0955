"""The AWSCluster controller: the cluster's network and API server load balancer.

The AWS work is done by the services (:mod:`controllers.services`); this module fetches the AWSCluster,
honours a pause, holds the finalizer, runs the create or delete workflow over a
:class:`~controllers.services.cluster_scope.ClusterScope`, summarises the conditions into ``Ready`` and
maps the events that wake an AWSCluster.

Create graph (:data:`CREATE`, each step with its condition): VPC → subnets per availability zone →
Join(security groups (control plane, nodes, and the load-balancer group shared with the cloud provider);
internet gateway and its attachment → Join(public route table; elastic IPs → NAT gateways → wait for
them → private route tables, routes, associations; network load balancer, target group and listener →
wait for it)) → ``status.ready`` and the control-plane endpoint. The internet gateway comes before the NAT
gateways and the load balancer because AWS refuses a public NAT gateway, and an internet-facing load
balancer, in a VPC without one; it takes no wait. A step waiting on AWS holds back only what depends on
it, and polls only what is still pending (:mod:`controllers.waits`); ``status.network`` is filled in as
its parts become known, so machines launch before the cluster is ready.

Delete (:data:`DELETE`) runs the services' deletions in reverse, waits where AWS is slow, sweeps anything
else tagged as the cluster's, and removes the finalizer only when everything is gone. A bring-your-own
VPC and subnets are unmanaged: read, recorded in ``status.network``, never modified or deleted (and the
gateways, NAT and route tables are then the user's business too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from capa_py.api.aws import AWSCLUSTER_FINALIZER, AWSCluster, AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.combinators import If, Join, Sequential
from capa_py.ctrlkit.result import Result, ignore_exit, no_requeue, requeue_after
from capa_py.engine.recorder import StatusRecorder
from capa_py.logging import get_logger
from capa_py.runtime.controller import key_of
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import WatchEvent
from controllers.aws_scope import Step, in_scope
from controllers.base import (
    add_finalizer,
    cluster_view,
    fetch,
    left_alone,
    mark_paused,
    patch_status,
    pause_reason,
    record_store_uid,
    remove_finalizer,
    settle,
)
from controllers.events import DELETION_BLOCKED
from controllers.identity import CONDITIONS as IDENTITY_CONDITIONS
from controllers.identity import RECHECK_AFTER, AWSController, IdentityError
from controllers.identity import WATCHED_KINDS as IDENTITY_WATCHED_KINDS
from controllers.services import bastion, dns, loadbalancer, network, objectstore, securitygroups, sweep
from controllers.services.bastion import BastionStep
from controllers.services.cluster_scope import ClusterScope
from controllers.services.loadbalancer import LOAD_BALANCER_READY
from controllers.services.network import (
    INTERNET_GATEWAY_READY,
    NAT_GATEWAYS_READY,
    ROUTE_TABLES_READY,
    SUBNETS_READY,
    VPC_READY,
)
from controllers.services.securitygroups import SECURITY_GROUPS_READY

CLUSTER_CONDITIONS = (
    *network.CONDITIONS,
    *securitygroups.CONDITIONS,
    *bastion.CONDITIONS,
    *loadbalancer.CONDITIONS,
)
"""The conditions ``Ready`` summarises (each service's), in the order the first one not true is reported:
VPC, subnets, internet gateway, NAT gateways, route tables, security groups, bastion host (when the cluster
has one), load balancer."""
_log = get_logger("controller.awscluster")


def _created_then_waited(
    create: str,
    create_fn: Callable[[ClusterScope], None],
    wait: str,
    wait_fn: Callable[[ClusterScope], None],
    condition: str,
) -> Action:
    """The wait step says whether the condition is true; the create step only reports failures."""
    return Sequential(
        Step(create, create_fn, condition, condition_on_success=False), Step(wait, wait_fn, condition)
    )


CREATE: Action = Sequential(
    Step("ReconcileVpc", network.reconcile_vpc, VPC_READY),
    Step("ReconcileSubnets", network.reconcile_subnets, SUBNETS_READY),
    Join(
        Sequential(
            Step(
                "ReconcileInternetGateway",
                network.reconcile_internet_gateway,
                INTERNET_GATEWAY_READY,
                condition_on_success=False,
            ),
            Join(
                # The load balancer first: it takes longest to become active (minutes on AWS).
                Sequential(
                    _created_then_waited(
                        "ReconcileLoadBalancer",
                        loadbalancer.reconcile_load_balancer,
                        "WaitForLoadBalancer",
                        loadbalancer.wait_for_load_balancer,
                        LOAD_BALANCER_READY,
                    ),
                    # The API server's name points at the load balancer: it waits for nothing else.
                    If(
                        dns.wants_api_server_dns,
                        Step("ReconcileAPIServerDNS", dns.reconcile_api_server_dns, dns.API_SERVER_DNS_READY),
                    ),
                ),
                Step(
                    "ReconcilePublicRouteTable", network.reconcile_public_route_table, INTERNET_GATEWAY_READY
                ),
                Sequential(
                    _created_then_waited(
                        "ReconcileNatGateways",
                        network.reconcile_nat_gateways,
                        "WaitForNatGateways",
                        network.wait_for_nat_gateways,
                        NAT_GATEWAYS_READY,
                    ),
                    Step(
                        "ReconcilePrivateRouteTables",
                        network.reconcile_private_route_tables,
                        ROUTE_TABLES_READY,
                    ),
                ),
            ),
        ),
        # Last in the pass: machines launch once the groups are recorded, and by then so is the target
        # group's ARN, so a machine is woken once for both. The bastion's group comes before the cluster's
        # (their SSH rule names it), its instance after (a disabled bastion's group is deleted once the
        # cluster's groups no longer name it).
        Sequential(
            BastionStep(
                "ReconcileBastionSecurityGroup",
                bastion.reconcile_bastion_security_group,
                condition_on_success=False,
            ),
            Step("ReconcileSecurityGroups", securitygroups.reconcile_security_groups, SECURITY_GROUPS_READY),
            BastionStep("ReconcileBastion", bastion.reconcile_bastion),
        ),
        # The machines' Ignition data bucket depends on nothing of the network.
        If(objectstore.wants_bucket, Step("ReconcileS3Bucket", objectstore.reconcile_bucket)),
    ),
    Step("MarkReady", loadbalancer.mark_ready),
)
"""One create pass of an AWSCluster, run over its :class:`ClusterScope`."""

DELETE: Action = Sequential(
    *(Step(deletion.description, deletion) for deletion in objectstore.DELETION),
    *(Step(deletion.description, deletion) for deletion in (*dns.DELETION, *loadbalancer.DELETION)),
    Step("DeleteBastionHost", bastion.delete_instance),
    *(Step(deletion.description, deletion) for deletion in securitygroups.DELETION),
    Step("DeleteBastionSecurityGroup", bastion.delete_security_group),
    *(Step(deletion.description, deletion) for deletion in network.DELETION),
    Step("SweepStrayResources", sweep.sweep_cluster_resources),
)
"""One delete pass: the Ignition bucket (emptied), the API server's record set and hosted zone, the load
balancer, the bastion host (its interface holds a subnet and its group), the cluster's security groups, the
bastion's (their rules name it), the network (the VPC last), then strays."""


class AWSClusterController(AWSController):
    name = "awscluster"
    kind = AWSCluster
    watched_kinds: tuple[type[KubeObject], ...] = (Cluster, AWSMachine, *IDENTITY_WATCHED_KINDS)
    status_kinds = ()
    # What an AWSCluster needs of its Cluster: that it exists, its uid and whether it is paused.
    views: ClassVar[dict[str, Callable[[Any], object]]] = {"Cluster": cluster_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        if isinstance(obj, IDENTITY_WATCHED_KINDS):
            # An identity (or a static identity's Secret) changed: the clusters whose chain names it.
            return [key_of(c) for c in self.identities.users_of(obj, event.type == "DELETED")]
        if isinstance(obj, AWSMachine):
            # A deleting AWSCluster waits for its machines; their removal is what it waits for.
            if event.type != "DELETED":
                return []
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            return (
                [
                    ObjectKey("AWSCluster", o.metadata.namespace or "", o.name)
                    for o in self.store.list(
                        AWSCluster,
                        namespace=obj.metadata.namespace,
                        label_selector=f"{CLUSTER_NAME_LABEL}={cluster}",
                    )
                    if o.being_deleted
                ]
                if cluster
                else []
            )
        if (
            isinstance(obj, Cluster)
            and obj.spec.infrastructure_ref
            and obj.spec.infrastructure_ref.kind == "AWSCluster"
        ):
            return [
                ObjectKey("AWSCluster", obj.metadata.namespace or "", obj.spec.infrastructure_ref.name or "")
            ]
        return []

    def owner_cluster(self, obj: AWSCluster) -> Cluster | None:
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Cluster"), None)
        if owner is None:
            return None
        return get_or_none(self.store, Cluster, owner.name, obj.namespace)

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, AWSCluster, key)
        if obj is None:
            return no_requeue()
        cluster = self.owner_cluster(obj)
        if not obj.being_deleted:
            if cluster is None:
                return (
                    no_requeue()
                )  # Cluster API core has not claimed it yet; its owner-reference write wakes us
            paused = pause_reason(obj, cluster)
            if paused is not None:
                mark_paused(self.store, obj, paused)
                return no_requeue()
            obj = add_finalizer(self.store, obj, AWSCLUSTER_FINALIZER)
            obj = record_store_uid(self.store, obj)
        elif AWSCLUSTER_FINALIZER not in obj.metadata.finalizers or left_alone(obj, cluster):
            return no_requeue()
        cluster_name = (
            cluster.name if cluster is not None else obj.metadata.labels.get(CLUSTER_NAME_LABEL, obj.name)
        )
        try:
            pool = self.identities.pool_for(obj)
        except IdentityError as exc:
            return self._identity_failed(obj, exc)
        aws = pool.for_region(obj.spec.region)
        scope = ClusterScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            aws,
            cluster_name,
            dict(obj.spec.additional_tags),
            events=self.events,
        )
        if obj.spec.identity_ref is not None:
            for condition in IDENTITY_CONDITIONS:
                scope.condition(condition, True)
        if obj.being_deleted:
            return self._delete(scope)
        result = ignore_exit(CREATE.run(in_scope(scope)))
        scope.summarize(CLUSTER_CONDITIONS)
        settle(self, key, scope.obj)
        scope.patch()
        return result

    def _identity_failed(self, obj: AWSCluster, exc: IdentityError) -> Result:
        """Nothing is created (or deleted) without the cluster's identity: say why, look again later."""
        message = str(exc)
        _log.warning("identity unusable", cluster=obj.ref(), reason=exc.reason, error=message)
        self.events.warning(obj, exc.reason, message)

        def unusable(o: AWSCluster) -> None:
            o.status.ready = False
            set_condition(o.status, exc.condition, False, exc.reason, message, "Error")
            set_condition(o.status, READY, False, exc.reason, message, "Error")

        patch_status(self.store, obj, unusable)
        return requeue_after(RECHECK_AFTER)

    def _delete(self, scope: ClusterScope) -> Result:

        def deleting(o: AWSCluster) -> None:
            o.status.ready = False
            set_condition(o.status, READY, False, "Deleting", "deleting the cluster's AWS resources", "Info")

        scope.change_status(deleting)
        machines = [
            m.name
            for m in self.store.list(
                AWSMachine,
                namespace=scope.obj.namespace,
                label_selector=f"{CLUSTER_NAME_LABEL}={scope.cluster_name}",
            )
        ]
        if machines:
            # Instances sit in the cluster's subnets and security groups: they go first.
            scope.waiting_on = (
                f"waiting for {len(machines)} AWSMachine(s) to be deleted: {', '.join(sorted(machines))}"
            )
            result = requeue_after(5.0)
        else:
            result = DELETE.run(in_scope(scope))
        if result.interrupts and scope.waiting_on:
            message = scope.waiting_on
            self.events.normal(scope.obj, DELETION_BLOCKED, message)

            def waiting(o: AWSCluster) -> None:
                set_condition(o.status, READY, False, "Deleting", message, "Info")

            scope.change_status(waiting)
        scope.patch()
        if result.interrupts:
            return result
        remove_finalizer(self.store, scope.obj, AWSCLUSTER_FINALIZER)
        _log.info("cluster infrastructure deleted", cluster=scope.cluster_name)
        return no_requeue()
