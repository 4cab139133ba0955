"""Client tokens: what AWS promises, what plain moto does, and what the token harness restores.

AWS returns the original result for a create repeated with the same ``ClientToken`` (same account and
region) and rejects the token with different parameters. Plain moto ignores the token and creates again —
which is why the ``moto`` endpoint profile lowers ``client_token`` — and the harness server
(``tests/harness/moto_tokens.py``) honours it, so token strategies can be exercised end to end.
"""

from __future__ import annotations

import pytest

from capa_py.aws.errors import InvalidRequest
from capa_py.aws.session import AWSClients
from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.tokens import client_token
from resources.instance import Instance
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route_table import RouteTable, RouteTableDesired
from tests.harness import moto_tokens
from tests.harness.moto_server import MotoServer
from tests.resources.builders import Builder

TOKEN = client_token("4b0c3f0e-machine-uid", "instance")


def test_plain_moto_ignores_client_token_as_the_moto_profile_says(aws: AWSClients) -> None:
    build = Builder(aws)
    desired = build.instance_desired(build.subnet().id)
    instances = Instance(aws)

    first = instances.create(desired, build.tags("node"), TOKEN)
    second = instances.create(desired, build.tags("node"), TOKEN)

    assert first.id != second.id, "moto 5.2 starts a second instance for a repeated token"
    assert Instance.traits.client_token
    assert AWS.effective("instance", Instance.traits).client_token
    assert not MOTO.effective("instance", Instance.traits).client_token


def test_token_server_returns_the_same_instance_for_the_same_token(aws_tokens: AWSClients) -> None:
    build = Builder(aws_tokens)
    desired = build.instance_desired(build.subnet().id)
    instances = Instance(aws_tokens)

    first = instances.create(desired, build.tags("node"), TOKEN)
    again = instances.create(desired, build.tags("node"), TOKEN)
    other = instances.create(desired, build.tags("node"), client_token("4b0c3f0e-machine-uid", "other"))

    assert again.id == first.id
    assert other.id != first.id
    reservations = aws_tokens.ec2.call("DescribeInstances")["Reservations"]
    assert sum(len(r["Instances"]) for r in reservations) == 2


def test_token_server_rejects_a_token_reused_with_other_parameters(aws_tokens: AWSClients) -> None:
    build = Builder(aws_tokens)
    desired = build.instance_desired(build.subnet().id)
    Instance(aws_tokens).create(desired, None, TOKEN)

    with pytest.raises(InvalidRequest) as failure:
        Instance(aws_tokens).create(
            build.instance_desired(desired.subnet_id, instance_type="m5.large"), None, TOKEN
        )
    assert failure.value.code == "IdempotentParameterMismatch"


def test_token_server_honours_nat_gateway_and_route_table_tokens(aws_tokens: AWSClients) -> None:
    build = Builder(aws_tokens)
    vpc_id = build.vpc().id
    tables = RouteTable(aws_tokens)
    table = tables.create(RouteTableDesired(vpc_id), build.tags("rtb"), "rtb-token")
    assert tables.create(RouteTableDesired(vpc_id), build.tags("rtb"), "rtb-token").id == table.id
    assert tables.create(RouteTableDesired(vpc_id), build.tags("rtb"), None).id != table.id, (
        "no token: a new one"
    )

    gateways = NatGateway(aws_tokens)
    desired = NatGatewayDesired(build.subnet(vpc_id).id, build.elastic_ip().id)
    gateway = gateways.create(desired, build.tags("nat"), "nat-token")
    assert gateways.create(desired, build.tags("nat"), "nat-token").id == gateway.id


def test_reset_forgets_tokens(aws_tokens: AWSClients, moto_token_server: MotoServer) -> None:
    build = Builder(aws_tokens)
    vpc_id = build.vpc().id
    RouteTable(aws_tokens).create(RouteTableDesired(vpc_id), None, "rtb-token")
    moto_token_server.reset()

    vpc_id = Builder(aws_tokens).vpc().id  # a different VPC: same token, other parameters
    table = RouteTable(aws_tokens).create(RouteTableDesired(vpc_id), None, "rtb-token")
    assert table.attributes["vpc_id"] == vpc_id


def test_token_wrapper_is_installed_only_in_the_server_process() -> None:
    assert moto_tokens.installed() is False, "importing the module patches nothing"
    assert set(moto_tokens.TOKEN_OPERATIONS) == {
        "run_instances",
        "create_nat_gateway",
        "create_route_table",
        "create_launch_template",
        "create_launch_template_version",
    }
