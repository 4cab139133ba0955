"""The whole-suite IAM check's parts: the call log every process writes, and the comparison with a policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_app.iam.bootstrap import observe
from capa_py.aws.calllog import CALL_LOG_ENV, read_call_logs
from capa_py.aws.session import AWSClients
from tests.harness.iam_calls import check_calls, is_whole_run


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


def test_capa_clients_log_each_operation_capa_calls_once_without_parameters(
    aws: AWSClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_LOG_ENV, str(tmp_path))
    observe(aws)  # capa-py's code: one GetCallerIdentity, then three of each Get
    observe(aws)
    [log] = tmp_path.glob("calls-*.log")
    assert sorted(log.read_text().splitlines()) == [
        "iam GetInstanceProfile",
        "iam GetPolicy",
        "iam GetRole",
        "sts GetCallerIdentity",
    ]
    assert read_call_logs(tmp_path) == {
        ("iam", "GetInstanceProfile"),
        ("iam", "GetPolicy"),
        ("iam", "GetRole"),
        ("sts", "GetCallerIdentity"),
    }


def test_a_test_calling_a_client_directly_to_set_up_its_world_is_not_logged(
    aws: AWSClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_LOG_ENV, str(tmp_path))
    aws.ec2.call("CreateKeyPair", KeyName="only-a-fixture")
    assert read_call_logs(tmp_path) == set()


def test_without_the_variable_nothing_is_logged(
    aws: AWSClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CALL_LOG_ENV, raising=False)
    observe(aws)
    assert read_call_logs(tmp_path) == set()


def _config(root: Path, args: list[str], **options: object) -> pytest.Config:
    from types import SimpleNamespace

    option = SimpleNamespace(keyword="", markexpr="", lf=False, deselect=None, exitfirst=False)
    for name, value in options.items():
        setattr(option, name, value)
    return SimpleNamespace(  # type: ignore[return-value]
        option=option,
        rootpath=root,
        args=args,
        invocation_params=SimpleNamespace(dir=root),
        getini=lambda name: ["tests"],
    )


def test_only_a_whole_run_is_checked(tmp_path: Path) -> None:
    assert is_whole_run(_config(tmp_path, ["tests"]))
    assert is_whole_run(_config(tmp_path, [str(tmp_path / "tests")]))
    assert not is_whole_run(_config(tmp_path, ["tests/iam"]))
    assert not is_whole_run(_config(tmp_path, ["tests"], keyword="bootstrap"))
    assert not is_whole_run(_config(tmp_path, ["tests"], markexpr="not slow"))
    assert not is_whole_run(_config(tmp_path, ["tests"], lf=True))
