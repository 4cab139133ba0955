"""The API server DNS service (``spec.apiServerDNS``, capa-py's own field): a private hosted zone for the
cluster's VPC and a CNAME of the API server's name to the control-plane load balancer.

1. :func:`reconcile_api_server_dns` — once the load balancer has its DNS name: the zone (strategy class 2
   on AWS: ``CallerReference`` token, tagged after; class 3 on moto and LocalStack) and the record set
   (class 5, ``UPSERT``, found again by zone, name and type). Then
   :func:`~controllers.services.loadbalancer.mark_ready` sets the control-plane endpoint's host to the name.

:data:`DELETION` deletes the record set, then the zone (Route 53 refuses to delete a zone that holds record
sets other than its SOA and NS), before the load balancer and the network.
"""

from __future__ import annotations

from capa_py.ctrlkit.action import Context
from controllers.aws_scope import SCOPE
from controllers.services.cluster_scope import ClusterScope, Deletion, RoleList, roles
from resources.hosted_zone import HostedZoneDesired
from resources.record_set import RecordSetDesired

API_SERVER_DNS_READY = "APIServerDNSReady"
ZONE_ROLE = "apiserver-dns-zone"
RECORD_ROLE = "apiserver-dns-record"
ROLES = (ZONE_ROLE, RECORD_ROLE)


def wants_api_server_dns(ctx: Context) -> bool:
    """Whether the cluster asks for an API server name (``spec.apiServerDNS``)."""
    scope: ClusterScope = ctx.values[SCOPE]
    return scope.obj.spec.api_server_dns is not None


def reconcile_api_server_dns(scope: ClusterScope) -> None:
    dns = scope.obj.spec.api_server_dns
    lb = scope.network.load_balancer
    vpc_id = scope.network.vpc_id or scope.obj.status.network.vpc_id
    if dns is None or lb is None or not lb.dns_name or vpc_id is None:
        return
    rcs = scope.resources
    zone = scope.ensure(
        rcs.hosted_zone,
        ZONE_ROLE,
        HostedZoneDesired(
            dns.zone, vpc_id, scope.aws.region, comment=f"capa-py cluster {scope.cluster_name}"
        ),
    )
    scope.ensure(
        rcs.record_set, RECORD_ROLE, RecordSetDesired(zone.id, dns.name, (lb.dns_name,), ttl=dns.ttl)
    )


def _dns_roles(role: str) -> RoleList:
    """The role, when the cluster asks for an API server name or something is recorded (or intended) under
    it: a cluster that never had one costs no Route 53 call to delete."""
    every = roles(role)

    def wanted(scope: ClusterScope) -> list[str]:
        if scope.obj.spec.api_server_dns is None and scope.kind_of(role) is None:
            return []
        return every(scope)

    return wanted


DELETION = (
    Deletion("DeleteAPIServerRecord", lambda r: r.record_set, _dns_roles(RECORD_ROLE)),
    Deletion("DeleteAPIServerZone", lambda r: r.hosted_zone, _dns_roles(ZONE_ROLE)),
)
