"""Prerequisites for the resource tests, made with the resource classes themselves over a moto server.

Imported by the tests as ``tests.resources.builders`` (``tests/resources/conftest.py`` makes the project
root importable); the ``build`` fixture hands out a :class:`Builder` bound to the test's clients.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy
from capa_py.engine.resource import Observed
from capa_py.engine.tags import managed_tags
from resources.autoscaling_group import AutoScalingGroupDesired
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.instance import Instance, InstanceDesired
from resources.internet_gateway import InternetGateway, InternetGatewayDesired
from resources.launch_template import LaunchTemplate, LaunchTemplateDesired, LaunchTemplateVersionDesired
from resources.load_balancer import LoadBalancer, LoadBalancerDesired
from resources.route_table import RouteTable, RouteTableDesired
from resources.subnet import Subnet, SubnetDesired
from resources.target_group import TargetGroup, TargetGroupDesired
from resources.vpc import Vpc, VpcDesired
from tests.harness.moto_server import MotoServer

REGION = "us-east-1"
ZONE = "us-east-1a"
CLUSTER = "alpha"
SERVICES = ("ec2", "elbv2", "iam", "route53", "s3")
"""The clients made up front for every test server."""

# Fail fast: moto answers at once, so long backoffs would only hide bugs behind slow tests. initial_delay
# stays at 1 s: session.py passes it to tenacity's wait_exponential_jitter(initial=...), deprecated in the
# installed tenacity, and any other value raises that DeprecationWarning (an error under filterwarnings).
TEST_RETRY = RetryPolicy(attempts=2, initial_delay=1.0, max_delay=1.0, not_found_window=1.0)


def _clean_aws_env(monkeypatch: pytest.MonkeyPatch, scratch: Path) -> None:
    """No ambient AWS configuration: no credentials, profiles, endpoints or instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(scratch / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(scratch / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def clients_for(server: MotoServer, scratch: Path) -> AWSClients:
    """AWSClients for a server, made in a clean AWS environment (rate limiting off: moto needs none).

    The clients the tests use are made here, eagerly, so that the developer's environment, restored
    afterwards, never reaches them; making botocore clients is the slow part of a test, hence made once.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        _clean_aws_env(monkeypatch, scratch)
        settings = AWSSettings(region=REGION, endpoint_url=server.url, retry=TEST_RETRY)
        clients = AWSClients(settings, limiter=RateLimiter(enabled=False))
        for service in SERVICES:
            clients.client(service)
    return clients


class Builder:
    """Prerequisites for a test, made with the resource classes and tagged for :data:`CLUSTER`."""

    def __init__(self, aws: AWSClients) -> None:
        self.aws = aws
        self._serial = itertools.count(1)
        self._image_id: str | None = None

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{next(self._serial)}"

    def tags(self, role: str, cluster: str = CLUSTER, **extra: str) -> dict[str, str]:
        return managed_tags(cluster, role, additional=extra)

    def vpc(self, cidr: str = "10.0.0.0/16") -> Observed:
        return Vpc(self.aws).create(VpcDesired(cidr), self.tags(self.unique("vpc")), None)

    def subnet(self, vpc_id: str | None = None, cidr: str = "10.0.1.0/24", public: bool = False) -> Observed:
        vpc_id = vpc_id or self.vpc().id
        desired = SubnetDesired(vpc_id, cidr, ZONE, is_public=public)
        return Subnet(self.aws).create(desired, self.tags(self.unique("subnet")), None)

    def internet_gateway(self) -> Observed:
        return InternetGateway(self.aws).create(InternetGatewayDesired(), self.tags(self.unique("igw")), None)

    def elastic_ip(self) -> Observed:
        return ElasticIp(self.aws).create(ElasticIpDesired(), self.tags(self.unique("eip")), None)

    def route_table(self, vpc_id: str) -> Observed:
        return RouteTable(self.aws).create(RouteTableDesired(vpc_id), self.tags(self.unique("rtb")), None)

    def image_id(self) -> str:
        if self._image_id is None:
            # The servers run without moto's bundled AMIs (see start_moto_server): register one.
            response = self.aws.ec2.call(
                "RegisterImage", Name="capa-test-node", RootDeviceName="/dev/sda1", Architecture="x86_64"
            )
            self._image_id = str(response["ImageId"])
        return self._image_id

    def instance_desired(self, subnet_id: str, **overrides: Any) -> InstanceDesired:
        fields: dict[str, Any] = {
            "image_id": self.image_id(),
            "instance_type": "t3.medium",
            "subnet_id": subnet_id,
        }
        fields.update(overrides)
        return InstanceDesired(**fields)

    def instance(self, subnet_id: str | None = None) -> Observed:
        subnet_id = subnet_id or self.subnet().id
        desired = self.instance_desired(subnet_id)
        return Instance(self.aws).create(desired, self.tags(self.unique("instance")), None)

    def load_balancer(self, subnet_id: str | None = None) -> Observed:
        subnet_id = subnet_id or self.subnet().id
        desired = LoadBalancerDesired(self.unique("lb"), (subnet_id,))
        return LoadBalancer(self.aws).create(desired, self.tags(self.unique("lb")), None)

    def target_group(self, vpc_id: str) -> Observed:
        desired = TargetGroupDesired(self.unique("tg"), vpc_id)
        return TargetGroup(self.aws).create(desired, self.tags(self.unique("tg")), None)

    def launch_data(self, instance_type: str = "t3.medium") -> dict[str, Any]:
        return {"ImageId": self.image_id(), "InstanceType": instance_type}

    def launch_template_desired(self, instance_type: str = "t3.medium") -> LaunchTemplateDesired:
        return LaunchTemplateDesired(self.unique("alpha-pool"), self.launch_data(instance_type))

    def launch_template(self) -> Observed:
        desired = self.launch_template_desired()
        return LaunchTemplate(self.aws).create(desired, self.tags(self.unique("lt")), None)

    def launch_template_version_desired(
        self, instance_type: str = "m5.large"
    ) -> LaunchTemplateVersionDesired:
        return LaunchTemplateVersionDesired(self.launch_template().id, self.launch_data(instance_type))

    def autoscaling_group_desired(self, size: int = 1) -> AutoScalingGroupDesired:
        template_id = self.launch_template().id
        return AutoScalingGroupDesired(
            self.unique("alpha-pool"), template_id, "1", 0, 3, size, (self.subnet().id,)
        )
