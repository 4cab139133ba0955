"""Deleting what AWS refuses to delete while something still holds it: release that first, then delete.

AWS answers the delete of an internet gateway still attached to a VPC, or of a route table still associated
with a subnet, with ``DependencyViolation``. :func:`release_and_delete` detaches the gateway from every VPC
it is attached to, or disassociates the table from its subnets (the main association goes with the VPC),
each release tolerating ``NotFound`` (someone got there first), and then deletes. A security group's
delete (:meth:`~resources.security_group.SecurityGroup.delete`) revokes its own rules that name other groups
first; :func:`revoke_cross_references` takes a set of groups about to go out of each other's rules at once.

What holds a resource is read from an observation of it: the one the caller has, or a describe made here
when the caller asks for it (``describe=True``); without either, nothing is released (a caller that
removes the parts as resources of their own, before the whole, as ``capa audit --delete`` does for route
table associations). Kinds are deleted in :data:`DELETION_ORDER`, dependents before what they depend on.
The stray sweep of a cluster's delete and ``capa audit --delete`` both delete through this module.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import Observed, ResourceClass
from resources.internet_gateway import InternetGatewayAttachment, attachment_id
from resources.route_table import RouteTableAssociation
from resources.security_group import SecurityGroup

DELETION_ORDER: tuple[str, ...] = (
    "autoscaling-group",
    "record-set",
    "hosted-zone",
    "instance",
    "secret",
    "parameter",
    "listener",
    "load-balancer",
    "target-registration",
    "target-group",
    "nat-gateway",
    "elastic-ip",
    "route-table-association",
    "route",
    "route-table",
    "internet-gateway-attachment",
    "internet-gateway",
    "launch-template-version",
    "launch-template",
    "subnet",
    "security-group",
    "vpc",
    "bucket",
)
"""Every resource class's kind, in the order AWS lets them be deleted: what uses or sits in a resource
goes before it (an Auto Scaling group before its launch template and subnets, a record set before its hosted
zone, a private hosted zone before the VPC it is associated with, an instance before its subnet, a NAT
gateway before its elastic IP, a subnet before its VPC). A bucket depends on nothing of a cluster's
network."""

_LIVE_ATTACHMENT_STATES = frozenset({"attaching", "attached", "available"})


def _detach_gateway(rc: ResourceClass[Any], observed: Observed) -> None:
    attachments = InternetGatewayAttachment(rc.aws)
    for attachment in observed.attributes.get("attachments", []):
        if attachment.get("vpc_id") and attachment.get("state") in _LIVE_ATTACHMENT_STATES:
            with suppress(NotFound):
                attachments.delete(attachment_id(observed.id, str(attachment["vpc_id"])))


def _disassociate_table(rc: ResourceClass[Any], observed: Observed) -> None:
    associations = RouteTableAssociation(rc.aws)
    for association in observed.attributes.get("associations", []):
        if association.get("id") and not association.get("main"):
            with suppress(NotFound):
                associations.delete(str(association["id"]))


_RELEASES = {"internet-gateway": _detach_gateway, "route-table": _disassociate_table}


def holds_dependents(kind: str) -> bool:
    """Whether a resource of ``kind`` may be held by something :func:`release_and_delete` releases."""
    return kind in _RELEASES


def release_dependents(rc: ResourceClass[Any], observed: Observed) -> None:
    """Detach, disassociate what ``observed`` shows holding the resource; what is already gone is fine."""
    release = _RELEASES.get(rc.kind)
    if release is not None:
        release(rc, observed)


def release_and_delete(
    rc: ResourceClass[Any], resource_id: str, observed: Observed | None = None, *, describe: bool = False
) -> None:
    """Release what holds the resource (read from ``observed``, or from a describe when ``describe`` is
    set and the kind can be held), then delete it.

    Raises :class:`~capa_py.aws.errors.NotFound` when the resource is already gone (the describe found
    nothing, or the delete said so), and the other classified AWS errors of the delete
    (``DependencyViolation`` while something not released here still holds it).
    """
    if observed is None and describe and holds_dependents(rc.kind):
        observed = rc.describe_by_id(resource_id)
        if observed is None:
            raise NotFound(f"{rc.kind} {resource_id} does not exist", rc.service, "describe")
    if observed is not None:
        release_dependents(rc, observed)
    rc.delete(resource_id)


def revoke_cross_references(aws: AWSClients, group_ids: list[str]) -> None:
    """Revoke the rules by which the given groups reference each other, so that they can go in any order."""
    groups = SecurityGroup(aws)
    for group_id in group_ids:
        with suppress(NotFound):
            groups.revoke_references_to(group_id, group_ids)
