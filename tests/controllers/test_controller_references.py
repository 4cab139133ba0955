"""A failed instance create is explained by the spec reference that does not exist, when one does not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from capa_py.api.aws import AWSMachineSpec
from capa_py.aws import errors
from controllers.references import explain_create_failure, machine_reference_error

if TYPE_CHECKING:
    from tests.controllers.conftest import Harness


def _spec(**fields: object) -> AWSMachineSpec:
    return AWSMachineSpec.model_validate(
        {"instanceType": "t3.medium", "ami": {"id": "ami-785db401"}, **fields}
    )


def _refused(code: str) -> errors.AWSError:
    return errors.classify_code(code, 400, "ec2")(f"ec2:RunInstances: {code}: m", "ec2", "RunInstances", code)


def test_a_missing_key_pair_is_named_by_its_field(harness: Harness) -> None:
    explained = explain_create_failure(
        harness.aws, _spec(sshKeyName="no-such-key"), None, _refused("InvalidKeyPair.NotFound")
    )
    assert isinstance(explained, errors.InvalidReference)
    assert str(explained) == "spec.sshKeyName: key pair no-such-key does not exist in us-east-1"
    assert isinstance(explained.__cause__, errors.InvalidRequest)


def test_a_key_pair_inherited_from_the_cluster_is_named_on_the_cluster(harness: Harness) -> None:
    explained = explain_create_failure(harness.aws, _spec(), "gone-key", _refused("InvalidKeyPair.NotFound"))
    assert str(explained) == "AWSCluster spec.sshKeyName: key pair gone-key does not exist in us-east-1"


def test_references_that_exist_leave_the_error_as_it_was(harness: Harness) -> None:
    harness.aws.ec2.call("CreateKeyPair", KeyName="present")
    original = _refused("InvalidParameterValue")
    assert explain_create_failure(harness.aws, _spec(sshKeyName="present"), None, original) is original
    assert machine_reference_error(harness.aws, _spec(sshKeyName="present"), None) is None


def test_errors_that_are_not_about_a_request_are_not_looked_into(harness: Harness) -> None:
    throttled = _refused("RequestLimitExceeded")
    assert explain_create_failure(harness.aws, _spec(sshKeyName="no-such-key"), None, throttled) is throttled
