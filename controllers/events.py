"""The Events the AWS controllers record, named as Cluster API Provider AWS names them.

An operator running ``kubectl describe awscluster demo`` sees what CAPA would show: one Normal event per
AWS resource created or deleted (``SuccessfulCreateVPC``, ``SuccessfulDeleteNATGateway``,
``SuccessfulCreate`` for an instance, ``SuccessfulTerminate`` when it goes), a Normal ``DeletionBlocked``
while a deletion waits on something and why, and a Warning ``Failed<Step>`` when a reconcile step fails
(``FailedReconcileVpc``, ``FailedTerminateInstance``). Messages name AWS ids and object names only.

:class:`ResourceEventReporter` is the engine's :class:`~capa_py.engine.engine.ResourceEvents` for one
reconcile: the engine tells it what it created or deleted, it records the event on the object reconciled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capa_py.api.meta import KubeObject
from capa_py.runtime.events import EventRecorder

DELETION_BLOCKED = "DeletionBlocked"


@dataclass(frozen=True)
class ResourceReasons:
    created: str
    created_message: str
    deleted: str
    deleted_message: str


# Per resource class (``resources/``): CAPA's reason and message for the create and for the delete. ``{id}``
# is the AWS id, ``{role}`` capa-py's role of the resource.
REASONS: dict[str, ResourceReasons] = {
    "vpc": ResourceReasons(
        "SuccessfulCreateVPC",
        "Created new managed VPC {id}",
        "SuccessfulDeleteVPC",
        "Deleted managed VPC {id}",
    ),
    "subnet": ResourceReasons(
        "SuccessfulCreateSubnet",
        "Created new managed Subnet {id}",
        "SuccessfulDeleteSubnet",
        "Deleted managed Subnet {id}",
    ),
    "internet-gateway": ResourceReasons(
        "SuccessfulCreateInternetGateway",
        "Created new managed Internet Gateway {id}",
        "SuccessfulDeleteInternetGateway",
        "Deleted Internet Gateway {id}",
    ),
    "internet-gateway-attachment": ResourceReasons(
        "SuccessfulAttachInternetGateway",
        "Internet Gateway attached: {id}",
        "SuccessfulDetachInternetGateway",
        "Internet Gateway detached: {id}",
    ),
    "elastic-ip": ResourceReasons(
        "SuccessfulAllocateEIP",
        "Allocated Elastic IP {id} for {role}",
        "SuccessfulReleaseEIP",
        "Released Elastic IP {id}",
    ),
    "nat-gateway": ResourceReasons(
        "SuccessfulCreateNATGateway",
        "Created new NAT Gateway {id}",
        "SuccessfulDeleteNATGateway",
        "Deleted NAT Gateway {id}",
    ),
    "route-table": ResourceReasons(
        "SuccessfulCreateRouteTable",
        "Created managed RouteTable {id}",
        "SuccessfulDeleteRouteTable",
        "Deleted managed RouteTable {id}",
    ),
    "route": ResourceReasons(
        "SuccessfulCreateRoute", "Created route {id}", "SuccessfulDeleteRoute", "Deleted route {id}"
    ),
    "route-table-association": ResourceReasons(
        "SuccessfulAssociateRouteTable",
        "Associated managed RouteTable: {id}",
        "SuccessfulDisassociateRouteTable",
        "Disassociated managed RouteTable: {id}",
    ),
    "security-group": ResourceReasons(
        "SuccessfulCreateSecurityGroup",
        "Created managed SecurityGroup {id} for Role {role}",
        "SuccessfulDeleteSecurityGroup",
        "Deleted managed SecurityGroup {id}",
    ),
    "load-balancer": ResourceReasons(
        "SuccessfulCreateLoadBalancer",
        "Created new load balancer {id}",
        "SuccessfulDeleteLoadBalancer",
        "Deleted load balancer {id}",
    ),
    "target-group": ResourceReasons(
        "SuccessfulCreateTargetGroup",
        "Created new target group {id}",
        "SuccessfulDeleteTargetGroup",
        "Deleted target group {id}",
    ),
    "listener": ResourceReasons(
        "SuccessfulCreateListener",
        "Created new listener {id}",
        "SuccessfulDeleteListener",
        "Deleted listener {id}",
    ),
    "target-registration": ResourceReasons(
        "SuccessfulAttachControlPlaneELB",
        "Control plane instance registered with load balancer: {id}",
        "SuccessfulDetachControlPlaneELB",
        "Control plane instance deregistered from load balancer: {id}",
    ),
    "instance": ResourceReasons(
        "SuccessfulCreate",
        "Created new instance with id {id}",
        "SuccessfulTerminate",
        "Terminated instance {id}",
    ),
}


def reasons_for(kind: str) -> ResourceReasons:
    """CAPA's reasons for a resource class; ``SuccessfulCreate<Kind>`` for one CAPA has none for."""
    known = REASONS.get(kind)
    if known is not None:
        return known
    noun = "".join(part.capitalize() for part in kind.split("-"))
    return ResourceReasons(
        f"SuccessfulCreate{noun}",
        f"Created {kind} {{id}}",
        f"SuccessfulDelete{noun}",
        f"Deleted {kind} {{id}}",
    )


def failure_reason(step: str) -> str:
    """The Warning reason of a failed step: ``Failed`` + the step's name (``FailedReconcileVpc``)."""
    return f"Failed{step}"


class ResourceEventReporter:
    """Records, on the object a reconcile acts for, what the engine created and deleted in AWS."""

    def __init__(self, recorder: EventRecorder, involved: Callable[[], KubeObject]) -> None:
        self.recorder = recorder
        self.involved = involved

    def created(self, kind: str, role: str, resource_id: str) -> None:
        reasons = reasons_for(kind)
        self.recorder.normal(
            self.involved(), reasons.created, reasons.created_message.format(id=resource_id, role=role)
        )

    def deleted(self, kind: str, role: str, resource_id: str) -> None:
        reasons = reasons_for(kind)
        self.recorder.normal(
            self.involved(), reasons.deleted, reasons.deleted_message.format(id=resource_id, role=role)
        )


__all__ = [
    "DELETION_BLOCKED",
    "REASONS",
    "ResourceEventReporter",
    "ResourceReasons",
    "failure_reason",
    "reasons_for",
]
