"""What a spec names but capa-py does not create: a bring-your-own VPC and subnets, a machine's subnet,
extra security groups, AMI, key pair and instance profile.

When one of them does not exist, AWS answers with a not-found code that, for a resource capa-py recorded,
would mean drift (retried, or re-created). Here it is a mistake in the spec that no retry can fix, so the
controllers turn it into :class:`~capa_py.aws.errors.InvalidReference` naming the field
(``spec.network.vpc.id: vpc-0abc does not exist in us-east-1``): the object gets a False condition with
reason ``InvalidReference`` and ``failureReason`` set, and ``capa apply`` stops at once.

A machine's subnet and extra security groups, when its spec names them, are checked once before its
instance is created (RunInstances would retry their not-found answer as eventual consistency); the AMI,
key pair and instance profile only after a create failed, so a healthy create costs no extra call for them.
"""

from __future__ import annotations

from collections.abc import Callable

from capa_py.api.aws import AWSMachineSpec
from capa_py.aws.errors import AWSError, InvalidReference, InvalidRequest
from capa_py.aws.errors import NotFound as AWSNotFound
from capa_py.aws.session import AWSClients
from resources._common import ec2_by_filter

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeImages",
    "ec2:DescribeKeyPairs",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "iam:GetInstanceProfile",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


def missing(field: str, what: str, region: str) -> InvalidReference:
    return InvalidReference(field, f"{what} does not exist in {region}")


def _exists(check: Callable[[], bool]) -> bool:
    """Whether a describe found it; a not-found answer is "no", anything else (throttling, permission)
    goes up as itself."""
    try:
        return check()
    except AWSError as exc:
        if isinstance(exc, AWSNotFound) or exc.code in _REFERENCE_CODES:
            return False
        raise


def subnets_missing(aws: AWSClients, ids: list[str]) -> set[str]:
    found = ec2_by_filter(aws.ec2, "DescribeSubnets", "Subnets", "subnet-id", ids)
    return set(ids) - {s["SubnetId"] for s in found}


def groups_missing(aws: AWSClients, ids: list[str]) -> set[str]:
    found = ec2_by_filter(aws.ec2, "DescribeSecurityGroups", "SecurityGroups", "group-id", ids)
    return set(ids) - {g["GroupId"] for g in found}


def image_exists(aws: AWSClients, image_id: str) -> bool:
    return bool(aws.ec2.call("DescribeImages", ImageIds=[image_id]).get("Images"))


def key_pair_exists(aws: AWSClients, name: str) -> bool:
    return bool(aws.ec2.call("DescribeKeyPairs", KeyNames=[name]).get("KeyPairs"))


def instance_profile_exists(aws: AWSClients, profile: str) -> bool:
    name = profile.rsplit("/", 1)[-1] if profile.startswith("arn:") else profile
    return bool(aws.client("iam").call("GetInstanceProfile", InstanceProfileName=name).get("InstanceProfile"))


def network_reference_error(aws: AWSClients, spec: AWSMachineSpec) -> InvalidReference | None:
    """A subnet or security group the machine's spec names that does not exist (no call when it names
    none). Checked before the create: RunInstances answers a missing one with a not-found code that it
    retries for a while, as it would for a subnet or group created moments before."""
    region = aws.region
    if spec.subnet is not None and spec.subnet.id and subnets_missing(aws, [spec.subnet.id]):
        return missing("spec.subnet.id", spec.subnet.id, region)
    extra = [(i, g.id) for i, g in enumerate(spec.additional_security_groups) if g.id]
    absent = groups_missing(aws, [group_id for _, group_id in extra]) if extra else set()
    for index, group_id in extra:
        if group_id in absent:
            return missing(f"spec.additionalSecurityGroups[{index}].id", group_id, region)
    return None


def machine_reference_error(
    aws: AWSClients, spec: AWSMachineSpec, cluster_key_name: str | None
) -> InvalidReference | None:
    """The first reference of a machine's spec that does not exist, as an error naming its field."""
    region = aws.region
    network = network_reference_error(aws, spec)
    if network is not None:
        return network
    if spec.ami.id and not _exists(lambda: image_exists(aws, spec.ami.id or "")):
        return missing("spec.ami.id", spec.ami.id, region)
    key_name = spec.ssh_key_name
    if key_name and not _exists(lambda: key_pair_exists(aws, key_name)):
        return missing("spec.sshKeyName", f"key pair {key_name}", region)
    inherited = cluster_key_name if not key_name else None
    if inherited and not _exists(lambda: key_pair_exists(aws, inherited)):
        return missing("AWSCluster spec.sshKeyName", f"key pair {inherited}", region)
    profile = spec.iam_instance_profile
    if profile and not _exists(lambda: instance_profile_exists(aws, profile)):
        return missing("spec.iamInstanceProfile", f"instance profile {profile}", region)
    return None


def explain_create_failure(
    aws: AWSClients, spec: AWSMachineSpec, cluster_key_name: str | None, error: AWSError
) -> AWSError:
    """The error to report for a failed instance create: a missing reference if there is one (AWS's own
    code for it may read like drift, or name no field: ``InvalidParameterValue`` for a missing instance
    profile), else the original error. Only not-found and bad-request errors are looked into, once per
    failed create."""
    if not isinstance(error, AWSNotFound | InvalidRequest) or isinstance(error, InvalidReference):
        return error
    found = machine_reference_error(aws, spec, cluster_key_name)
    if found is None:
        return error
    found.__cause__ = error
    return found


# Codes a describe answers with when what it was asked about is missing (some are not NotFound: EC2 treats
# a missing AMI or key pair as a bad request).
_REFERENCE_CODES = frozenset(
    {
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Malformed",
        "InvalidAMIID.Unavailable",
        "InvalidKeyPair.NotFound",
        "InvalidParameterValue",
        "InvalidSubnetID.NotFound",
        "InvalidGroup.NotFound",
    }
)
