"""Every module that calls AWS declares exactly the IAM actions its calls need, and a policy collects them."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_app.iam.policy import CONTROLLER_MODULES, OPERATOR_MODULES, declared_actions
from capa_py.aws.iam_actions import iam_action
from tests.harness.aws_call_scan import actions_called, declaration_problems

ROOT = Path(__file__).resolve().parents[2]
POLICY_MODULES = set(CONTROLLER_MODULES) | set(OPERATOR_MODULES)


def _module(root: Path, name: str, source: str) -> None:
    path = root.joinpath(*name.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)


def test_every_module_that_calls_aws_declares_exactly_the_actions_its_calls_need() -> None:
    assert declaration_problems(ROOT, POLICY_MODULES) == []


def test_no_module_is_collected_by_both_policies() -> None:
    assert set(CONTROLLER_MODULES) & set(OPERATOR_MODULES) == set()


def test_every_module_a_policy_collects_declares_its_actions() -> None:
    assert declared_actions(tuple(sorted(POLICY_MODULES)))


def test_a_module_that_calls_aws_without_declaring_is_reported(tmp_path: Path) -> None:
    _module(
        tmp_path,
        "resources.thing",
        'def make(aws):\n    aws.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")\n'
        '    return aws.client("iam").call(\n        "GetRole", RoleName="x"\n    )\n',
    )
    assert declaration_problems(tmp_path, {"resources.thing"}) == [
        "resources.thing calls AWS but declares no IAM_ACTIONS; it needs ['ec2:CreateVpc', 'iam:GetRole']"
    ]


def test_an_action_declared_that_no_call_needs_and_a_call_not_declared_are_reported(tmp_path: Path) -> None:
    _module(
        tmp_path,
        "controllers.thing",
        'IAM_ACTIONS: tuple[str, ...] = ("ec2:DeleteVpc", "ec2:DescribeVpcs")\n'
        'def run(aws):\n    aws.ec2.call("CreateVpc")\n    aws.ec2.pages("DescribeVpcs", "Vpcs")\n',
    )
    assert declaration_problems(tmp_path, {"controllers.thing"}) == [
        "controllers.thing calls AWS with actions its IAM_ACTIONS lacks: ['ec2:CreateVpc']",
        "controllers.thing declares IAM_ACTIONS no call of it needs: ['ec2:DeleteVpc']",
    ]


def test_a_declaring_module_no_policy_collects_is_reported(tmp_path: Path) -> None:
    _module(
        tmp_path,
        "resources.bucket",
        'IAM_ACTIONS: tuple[str, ...] = ("s3:ListBucket",)\n'
        'def exists(aws):\n    aws.client("s3").call("HeadBucket", Bucket="b")\n',
    )
    [problem] = declaration_problems(tmp_path, set())
    assert "resources.bucket declares IAM_ACTIONS but no policy collects them" in problem
    assert "capa_app/iam/policy.py" in problem


def test_operations_handed_to_helpers_count_but_docstrings_and_comparisons_do_not(tmp_path: Path) -> None:
    _module(
        tmp_path,
        "resources.sample",
        '"""Calls DescribeSubnets? No: "DescribeSubnets" in a docstring is prose."""\n'
        'LISTING = Listing("DescribeVpcs", "Vpcs")\n'
        "def run(aws, egress, route):\n"
        '    ec2_items(aws.ec2, "DescribeRouteTables", "RouteTables")\n'
        '    operation = "RevokeSecurityGroupEgress" if egress else "RevokeSecurityGroupIngress"\n'
        '    if route["origin"] == "CreateRoute":\n'
        "        aws.ec2.call(operation)\n",
    )
    assert actions_called(tmp_path / "resources" / "sample.py") == {
        "ec2:DescribeRouteTables",
        "ec2:DescribeVpcs",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupIngress",
    }


def test_the_client_a_call_is_made_on_decides_the_service(tmp_path: Path) -> None:
    # DescribeTags is an operation of EC2 and of Elastic Load Balancing: the receiver says which.
    _module(
        tmp_path,
        "resources.tags",
        'def tags(aws):\n    aws.ec2.call("CreateTags")\n    aws.elbv2.call("DescribeTags")\n',
    )
    assert actions_called(tmp_path / "resources" / "tags.py") == {
        "ec2:CreateTags",
        "elasticloadbalancing:DescribeTags",
    }


@pytest.mark.parametrize(
    ("service", "operation", "action"),
    [
        ("ec2", "CreateVpc", "ec2:CreateVpc"),
        ("elbv2", "CreateLoadBalancer", "elasticloadbalancing:CreateLoadBalancer"),
        ("elb", "DeleteLoadBalancer", "elasticloadbalancing:DeleteLoadBalancer"),
        ("resourcegroupstaggingapi", "GetResources", "tag:GetResources"),
        ("s3", "HeadBucket", "s3:ListBucket"),
        ("s3", "PutPublicAccessBlock", "s3:PutBucketPublicAccessBlock"),
        ("s3", "CreateBucket", "s3:CreateBucket"),
    ],
)
def test_operations_map_to_the_iam_actions_that_authorize_them(
    service: str, operation: str, action: str
) -> None:
    assert iam_action(service, operation) == action


def test_a_service_without_a_known_prefix_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'quux'"):
        iam_action("quux", "DoThing")
