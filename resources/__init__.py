"""The AWS resource classes capa-py manages, one module each.

Each module declares a desired-state dataclass and a :class:`~capa_py.engine.resource.ResourceClass` with
the facts of its AWS create API (its traits) and its calls; the engine picks the strategy. This package
lists them all for the engine, the CLI and the traits-honesty test.
"""

from __future__ import annotations

from typing import Any

from capa_py.engine.resource import ResourceClass
from resources.autoscaling_group import AutoScalingGroup
from resources.bucket import Bucket
from resources.elastic_ip import ElasticIp
from resources.hosted_zone import HostedZone
from resources.instance import Instance
from resources.internet_gateway import InternetGateway, InternetGatewayAttachment
from resources.launch_template import LaunchTemplate, LaunchTemplateVersion
from resources.listener import Listener
from resources.load_balancer import LoadBalancer
from resources.nat_gateway import NatGateway
from resources.parameter import Parameter
from resources.record_set import RecordSet
from resources.route import Route
from resources.route_table import RouteTable, RouteTableAssociation
from resources.secret import Secret
from resources.security_group import SecurityGroup
from resources.subnet import Subnet
from resources.target_group import TargetGroup, TargetRegistration
from resources.vpc import Vpc

RESOURCE_CLASSES: tuple[type[ResourceClass[Any]], ...] = (
    Vpc,
    Subnet,
    InternetGateway,
    InternetGatewayAttachment,
    ElasticIp,
    NatGateway,
    RouteTable,
    Route,
    RouteTableAssociation,
    SecurityGroup,
    LoadBalancer,
    TargetGroup,
    Listener,
    TargetRegistration,
    Secret,
    Parameter,
    Instance,
    HostedZone,
    RecordSet,
    Bucket,
    LaunchTemplate,
    LaunchTemplateVersion,
    AutoScalingGroup,
)
"""Every resource class, in creation order for a cluster."""

_BY_KIND: dict[str, type[ResourceClass[Any]]] = {cls.kind: cls for cls in RESOURCE_CLASSES}


def resource_class(kind: str) -> type[ResourceClass[Any]]:
    """The resource class for a kind (``vpc``, ``nat-gateway``…)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise KeyError(f"unknown resource kind {kind!r} (known: {', '.join(sorted(_BY_KIND))})") from None


__all__ = [
    "RESOURCE_CLASSES",
    "AutoScalingGroup",
    "Bucket",
    "ElasticIp",
    "HostedZone",
    "Instance",
    "InternetGateway",
    "InternetGatewayAttachment",
    "LaunchTemplate",
    "LaunchTemplateVersion",
    "Listener",
    "LoadBalancer",
    "NatGateway",
    "Parameter",
    "RecordSet",
    "Route",
    "RouteTable",
    "RouteTableAssociation",
    "Secret",
    "SecurityGroup",
    "Subnet",
    "TargetGroup",
    "TargetRegistration",
    "Vpc",
    "resource_class",
]
