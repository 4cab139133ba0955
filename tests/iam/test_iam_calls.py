"""The whole-suite IAM check's parts: the call log every process writes, and the comparison with a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.aws.calllog import CALL_LOG_ENV, read_call_logs
from capa_py.aws.session import AWSClients
from tests.harness.iam_calls import check_calls


def test_a_call_the_policy_does_not_grant_is_reported() -> None:
    problems = check_calls([("ec2", "CreateVpc"), ("ec2", "DeleteVpc")], ["ec2:CreateVpc"], never_called={})
    assert len(problems) == 1
    assert problems[0].startswith("ec2:DeleteVpc was called, but the policy does not grant ec2:DeleteVpc")


def test_a_grant_no_call_used_is_reported() -> None:
    problems = check_calls([("ec2", "CreateVpc")], ["ec2:CreateVpc", "ec2:ModifyVolume"], never_called={})
    assert len(problems) == 1
    assert problems[0].startswith("the policy grants ec2:ModifyVolume, but no test called it")


def test_a_grant_listed_as_never_called_with_a_reason_is_not_reported() -> None:
    assert (
        check_calls([], ["iam:PassRole"], never_called={"iam:PassRole": "checked inside RunInstances"}) == []
    )


def test_a_never_called_entry_that_was_called_is_reported_as_stale() -> None:
    problems = check_calls([("ec2", "CreateVpc")], ["ec2:CreateVpc"], never_called={"ec2:CreateVpc": "x"})
    assert problems == [
        "ec2:CreateVpc is listed in NEVER_CALLED, but a test called it: remove it from the list"
    ]


def test_calls_are_compared_as_iam_actions() -> None:
    # HeadBucket is authorized by s3:ListBucket: granting that is enough, and it counts as used.
    assert check_calls([("s3", "HeadBucket")], ["s3:ListBucket"], never_called={}) == []


def test_capa_clients_log_each_operation_once_without_parameters(
    aws: AWSClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_LOG_ENV, str(tmp_path))
    aws.ec2.call("DescribeVpcs")
    aws.ec2.call("DescribeVpcs", Filters=[{"Name": "tag:secret-looking", "Values": ["value-never-logged"]}])
    aws.client("sts").call("GetCallerIdentity")
    [log] = tmp_path.glob("calls-*.log")
    assert log.read_text().splitlines() == ["ec2 DescribeVpcs", "sts GetCallerIdentity"]
    assert read_call_logs(tmp_path) == {("ec2", "DescribeVpcs"), ("sts", "GetCallerIdentity")}


def test_without_the_variable_nothing_is_logged(
    aws: AWSClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CALL_LOG_ENV, raising=False)
    aws.ec2.call("DescribeSubnets")
    assert read_call_logs(tmp_path) == set()
