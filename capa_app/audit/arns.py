"""From an ARN the Resource Groups Tagging API returns to the audit's (kind, id).

The tagging API names every resource by ARN; the rest of capa-py names them as the service does (``vpc-…``,
an ELBv2 ARN, a classic load balancer's name) under a kind (``vpc``, ``load-balancer``). A resource type the
audit has no describe or delete calls for keeps its ARN as id under the kind ``<service>:<type>``: it is
still reported (it carries a cluster's tag), but never deleted.
"""

from __future__ import annotations

from typing import NamedTuple

_EC2_TYPES = {
    "vpc": "vpc",
    "subnet": "subnet",
    "internet-gateway": "internet-gateway",
    "elastic-ip": "elastic-ip",
    "natgateway": "nat-gateway",
    "route-table": "route-table",
    "security-group": "security-group",
    "security-group-rule": "security-group-rule",
    "network-interface": "network-interface",
    "volume": "volume",
    "instance": "instance",
    "launch-template": "launch-template",
    "vpc-endpoint": "vpc-endpoint",
}
_ELBV2_LOAD_BALANCER_TYPES = ("app/", "net/", "gwy/")


class ArnRef(NamedTuple):
    kind: str
    id: str
    region: str


def parse_arn(arn: str) -> ArnRef:
    """``arn:aws:ec2:us-east-1:123:vpc/vpc-1`` → ``ArnRef("vpc", "vpc-1", "us-east-1")``."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        raise ValueError(f"not an ARN: {arn!r}")
    _, _, service, region, _, resource = parts
    resource_type, _, rest = resource.partition("/")
    if service == "ec2" and resource_type in _EC2_TYPES and rest:
        return ArnRef(_EC2_TYPES[resource_type], rest, region)
    if service == "elasticloadbalancing":
        if resource_type == "loadbalancer":
            if rest.startswith(_ELBV2_LOAD_BALANCER_TYPES):
                return ArnRef("load-balancer", arn, region)
            return ArnRef("classic-load-balancer", rest, region)
        if resource_type == "targetgroup":
            return ArnRef("target-group", arn, region)
        if resource_type == "listener":
            return ArnRef("listener", arn, region)
    if service == "secretsmanager" and resource.startswith("secret:"):
        # arn:…:secret:<name>-<six random characters>
        return ArnRef("secret", resource.removeprefix("secret:").rsplit("-", 1)[0], region)
    if service == "ssm" and resource_type == "parameter" and rest:
        # arn:…:parameter/cluster.x-k8s.io/<id>/<n> names /cluster.x-k8s.io/<id>/<n>
        return ArnRef("parameter", f"/{rest}", region)
    if service == "route53" and resource_type == "hostedzone" and rest:
        return ArnRef("hosted-zone", rest, region)
    if service == "s3" and resource_type and not rest:
        return ArnRef("bucket", resource_type, region)
    if service == "iam" and resource_type in ("role", "instance-profile"):
        kind = "iam-role" if resource_type == "role" else "iam-instance-profile"
        return ArnRef(kind, rest.rsplit("/", 1)[-1], region)
    return ArnRef(f"{service}:{resource_type}", arn, region)
