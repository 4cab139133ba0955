"""How to delete each kind the audit may delete, and how to tell a slow delete has finished.

Kinds capa-py manages go through their resource class and :func:`resources.deletion.release_and_delete`
(an internet gateway detached from its VPCs first; an Auto Scaling group with its instances, waited for),
the routine the cluster delete's stray sweep uses, so a delete here is the delete the controllers make; the
others (network interfaces, volumes, VPC endpoints, classic load balancers, security group rules, IAM) are a
call or two each. A deleter raises
the classified AWS errors: :class:`~capa_py.aws.errors.NotFound` means already gone, the retryable ones (a
dependency still going away, throttling) are retried by the executor.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from capa_app.audit.ec2_kinds import describe_ec2
from capa_app.audit.iam_kinds import iam_pages
from capa_app.audit.model import AuditRow
from capa_py.aws.errors import NotFound, classify_code
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import ResourceClass
from resources import resource_class
from resources.deletion import release_and_delete, revoke_cross_references

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteVolume",
    "ec2:DeleteVpcEndpoints",
    "ec2:RevokeSecurityGroupEgress",
    "ec2:RevokeSecurityGroupIngress",
    "elasticloadbalancing:DeleteLoadBalancer",
    "iam:DeleteInstanceProfile",
    "iam:DeleteRole",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:GetInstanceProfile",
    "iam:ListAttachedRolePolicies",
    "iam:ListInstanceProfilesForRole",
    "iam:ListRolePolicies",
    "iam:RemoveRoleFromInstanceProfile",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

Start = Callable[[AWSClients, AuditRow], None]
Gone = Callable[[AWSClients, AuditRow], bool]


@dataclass(frozen=True)
class Deleter:
    start: Start
    gone: Gone | None = None
    """For deletes AWS finishes later (instances, NAT gateways, load balancers): whether it has."""


def _via_resource_class(kind: str, *, describe: bool = False) -> Start:
    """The resource class's delete, after releasing what holds the resource: what a describe shows when
    ``describe`` is set (an internet gateway's attachments); otherwise the plan has removed the parts as rows
    of their own already (a route table's associations)."""

    def start(aws: AWSClients, row: AuditRow) -> None:
        rc: ResourceClass[Any] = resource_class(kind)(aws)
        release_and_delete(rc, row.id, describe=describe)

    return start


def _gone_via_resource_class(kind: str) -> Gone:
    def gone(aws: AWSClients, row: AuditRow) -> bool:
        rc: ResourceClass[Any] = resource_class(kind)(aws)
        return rc.describe_by_id(row.id) is None

    return gone


def _ec2_call(operation: str, parameter: str) -> Start:
    def start(aws: AWSClients, row: AuditRow) -> None:
        params: dict[str, Any] = {parameter: row.id}
        aws.ec2.call(operation, **params)

    return start


def _delete_vpc_endpoint(aws: AWSClients, row: AuditRow) -> None:
    response = aws.ec2.call("DeleteVpcEndpoints", VpcEndpointIds=[row.id])
    for failure in response.get("Unsuccessful", []):
        error = failure.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        raise classify_code(code, service="ec2")(
            f"ec2:DeleteVpcEndpoints: {code}: {error.get('Message', '')}", "ec2", "DeleteVpcEndpoints", code
        )


def _vpc_endpoint_gone(aws: AWSClients, row: AuditRow) -> bool:
    return not [f for f in describe_ec2(aws, "vpc-endpoint", ids=[row.id]) if f.state != "deleting"]


def _revoke_rule(aws: AWSClients, row: AuditRow) -> None:
    egress = bool(row.attributes.get("is_egress"))
    operation = "RevokeSecurityGroupEgress" if egress else "RevokeSecurityGroupIngress"
    group_id = row.attributes.get("group_id") or row.parent
    aws.ec2.call(operation, GroupId=group_id, SecurityGroupRuleIds=[row.id])


def _delete_classic_load_balancer(aws: AWSClients, row: AuditRow) -> None:
    aws.client("elb").call("DeleteLoadBalancer", LoadBalancerName=row.id)


def _delete_instance_profile(aws: AWSClients, row: AuditRow) -> None:
    iam = aws.client("iam")
    profile = iam.call("GetInstanceProfile", InstanceProfileName=row.id)["InstanceProfile"]
    for role in profile.get("Roles", []):
        with suppress(NotFound):
            iam.call("RemoveRoleFromInstanceProfile", InstanceProfileName=row.id, RoleName=role["RoleName"])
    iam.call("DeleteInstanceProfile", InstanceProfileName=row.id)


def _delete_role(aws: AWSClients, row: AuditRow) -> None:
    """Out of its instance profiles, its policies detached and deleted, then the role."""
    iam = aws.client("iam")
    for profile in list(iam_pages(aws, "ListInstanceProfilesForRole", "InstanceProfiles", RoleName=row.id)):
        with suppress(NotFound):
            iam.call(
                "RemoveRoleFromInstanceProfile",
                InstanceProfileName=profile["InstanceProfileName"],
                RoleName=row.id,
            )
    for policy in list(iam_pages(aws, "ListAttachedRolePolicies", "AttachedPolicies", RoleName=row.id)):
        with suppress(NotFound):
            iam.call("DetachRolePolicy", RoleName=row.id, PolicyArn=policy["PolicyArn"])
    for name in list(iam_pages(aws, "ListRolePolicies", "PolicyNames", RoleName=row.id)):
        with suppress(NotFound):
            iam.call("DeleteRolePolicy", RoleName=row.id, PolicyName=name)
    iam.call("DeleteRole", RoleName=row.id)


DELETERS: dict[str, Deleter] = {
    "record-set": Deleter(_via_resource_class("record-set")),
    "hosted-zone": Deleter(_via_resource_class("hosted-zone")),
    "autoscaling-group": Deleter(
        _via_resource_class("autoscaling-group"), _gone_via_resource_class("autoscaling-group")
    ),
    "instance": Deleter(_via_resource_class("instance"), _gone_via_resource_class("instance")),
    "secret": Deleter(_via_resource_class("secret")),
    "parameter": Deleter(_via_resource_class("parameter")),
    "classic-load-balancer": Deleter(_delete_classic_load_balancer),
    "listener": Deleter(_via_resource_class("listener")),
    "load-balancer": Deleter(_via_resource_class("load-balancer"), _gone_via_resource_class("load-balancer")),
    "target-registration": Deleter(_via_resource_class("target-registration")),
    "target-group": Deleter(_via_resource_class("target-group")),
    "nat-gateway": Deleter(_via_resource_class("nat-gateway"), _gone_via_resource_class("nat-gateway")),
    "vpc-endpoint": Deleter(_delete_vpc_endpoint, _vpc_endpoint_gone),
    "elastic-ip": Deleter(_via_resource_class("elastic-ip")),
    "route-table-association": Deleter(_via_resource_class("route-table-association")),
    "route": Deleter(_via_resource_class("route")),
    "route-table": Deleter(_via_resource_class("route-table")),
    "internet-gateway-attachment": Deleter(_via_resource_class("internet-gateway-attachment")),
    "internet-gateway": Deleter(_via_resource_class("internet-gateway", describe=True)),
    "network-interface": Deleter(_ec2_call("DeleteNetworkInterface", "NetworkInterfaceId")),
    "volume": Deleter(_ec2_call("DeleteVolume", "VolumeId")),
    "launch-template": Deleter(_via_resource_class("launch-template")),
    "subnet": Deleter(_via_resource_class("subnet")),
    "security-group-rule": Deleter(_revoke_rule),
    "security-group": Deleter(_via_resource_class("security-group")),
    "vpc": Deleter(_via_resource_class("vpc")),
    "bucket": Deleter(_via_resource_class("bucket")),
    "iam-instance-profile": Deleter(_delete_instance_profile),
    "iam-role": Deleter(_delete_role),
}

__all__ = ["DELETERS", "Deleter", "revoke_cross_references"]
