"""EC2 instances (``RunInstances``): the machines of the cluster, one per AWSMachine.

The bootstrap data (user data) is a secret — it carries join tokens and certificates. It is passed to
``RunInstances`` as raw bytes (botocore base64-encodes ``UserData`` for this operation, so encoding it here
too would double-encode it), is kept out of :class:`InstanceDesired`'s ``repr`` and out of
:meth:`Instance.fingerprint`, and is never logged.

The instance and its root volume are tagged in the same call. ``ClientToken`` (derived from the AWSMachine's
uid) makes a repeated create return the first instance. Terminated instances stay visible for about an hour:
:meth:`Instance.describe_by_id` returns None for them, and lookups by tags skip them and those shutting down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capa_py.aws.errors import InvalidRequest
from capa_py.cache.known import known_of
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.tags import owning_cluster
from capa_py.engine.traits import Traits
from resources._common import (
    carries,
    client_token_param,
    ec2_by_filter,
    ec2_create_tags,
    ec2_items,
    tag_specifications,
)

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeVolumes",
    "ec2:ModifyInstanceAttribute",
    "ec2:ModifyVolume",
    "ec2:RunInstances",
    "ec2:TerminateInstances",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

DEFAULT_ROOT_DEVICE = "/dev/xvda"
DESCRIBE_PAGE = 1000
"""``MaxResults`` of a ``DescribeInstances`` by filter: the largest page AWS allows. Without it the service
picks the page (moto: 100 reservations), and 200 clusters' 600 instances would take six calls."""
LIVE_STATES = ("pending", "running", "stopping", "stopped")
GONE_STATES = frozenset({"terminated"})


@dataclass(frozen=True)
class InstanceDesired:
    image_id: str
    instance_type: str
    subnet_id: str
    security_group_ids: tuple[str, ...] = ()
    iam_instance_profile: str | None = None
    """An instance profile name, or its ARN."""
    key_name: str | None = None
    root_volume_size: int | None = None
    """GiB; None keeps the AMI's root volume as it is."""
    root_volume_type: str = "gp3"
    root_volume_iops: int | None = None
    """Provisioned IOPS of the root volume (io1, io2, gp3); None: the volume type's default."""
    root_volume_encrypted: bool | None = None
    """None: the account's default encryption setting decides."""
    root_device_name: str | None = None
    """None: read from the AMI (``DescribeImages``) when a root volume size is given."""
    public_ip: bool | None = None
    """Whether the primary interface gets a public address; None: the subnet's default decides."""
    spot: bool = False
    """Launch as a Spot Instance: a one-time request, terminated when AWS interrupts it."""
    spot_max_price: str | None = None
    """The Spot Instance's maximum hourly price (US dollars); None: up to the On-Demand price."""
    user_data: bytes = field(default=b"", repr=False)
    """The bootstrap data, raw (not base64). Secret: never logged, never fingerprinted, not in repr."""


def _security_group_ids(instance: Mapping[str, Any]) -> list[str]:
    """The instance's groups; those of its primary interface when the instance lists none (moto lists
    none for an instance launched with an interface specification, as a public address asks)."""
    groups: list[Mapping[str, Any]] = instance.get("SecurityGroups") or next(
        (
            i.get("Groups", [])
            for i in instance.get("NetworkInterfaces", [])
            if i.get("Attachment", {}).get("DeviceIndex", 0) == 0
        ),
        [],
    )
    return sorted(g["GroupId"] for g in groups)


def _observed(instance: Mapping[str, Any]) -> Observed:
    profile = instance.get("IamInstanceProfile") or {}
    return Observed(
        id=instance["InstanceId"],
        tags=tag_dict(instance.get("Tags")),
        state=instance.get("State", {}).get("Name"),
        created_at=instance.get("LaunchTime"),
        attributes={
            "image_id": instance.get("ImageId"),
            "instance_type": instance.get("InstanceType"),
            "subnet_id": instance.get("SubnetId"),
            "vpc_id": instance.get("VpcId"),
            "availability_zone": instance.get("Placement", {}).get("AvailabilityZone"),
            "private_ip": instance.get("PrivateIpAddress"),
            "public_ip": instance.get("PublicIpAddress"),
            "private_dns_name": instance.get("PrivateDnsName") or None,
            "public_dns_name": instance.get("PublicDnsName") or None,
            "security_group_ids": _security_group_ids(instance),
            "iam_instance_profile_arn": profile.get("Arn"),
            "key_name": instance.get("KeyName"),
            "lifecycle": instance.get("InstanceLifecycle") or "on-demand",
            "root_volume_id": next(
                (
                    m.get("Ebs", {}).get("VolumeId")
                    for m in instance.get("BlockDeviceMappings", [])
                    if m.get("DeviceName") == instance.get("RootDeviceName")
                ),
                None,
            ),
        },
    )


class Instance(ResourceClass[InstanceDesired]):
    """An EC2 instance. ``delete`` terminates it; of an id that does not exist it raises
    :class:`~capa_py.aws.errors.NotFound` (``InvalidInstanceID.NotFound``); terminating an instance already
    terminated succeeds."""

    kind = "instance"
    service = "ec2"
    create_operation = "RunInstances"
    traits = Traits(tag_on_create=True, client_token=True, taggable=True)
    """RunInstances accepts TagSpecifications for the instance and its volumes (tag_on_create) and
    ClientToken (client_token); CreateTags tags it later (taggable)."""

    def create(self, desired: InstanceDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        params: dict[str, Any] = {
            "ImageId": desired.image_id,
            "InstanceType": desired.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            **tag_specifications(("instance", "volume"), tags),
            **client_token_param(token),
        }
        if desired.public_ip is None:
            params["SubnetId"] = desired.subnet_id
            if desired.security_group_ids:
                params["SecurityGroupIds"] = list(desired.security_group_ids)
        else:
            # AssociatePublicIpAddress exists only on an interface specification, which then carries the
            # subnet and the groups too (EC2 refuses them at both levels).
            interface: dict[str, Any] = {
                "DeviceIndex": 0,
                "SubnetId": desired.subnet_id,
                "AssociatePublicIpAddress": desired.public_ip,
                "DeleteOnTermination": True,
            }
            if desired.security_group_ids:
                interface["Groups"] = list(desired.security_group_ids)
            params["NetworkInterfaces"] = [interface]
        if desired.iam_instance_profile:
            profile_key = "Arn" if desired.iam_instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {profile_key: desired.iam_instance_profile}
        if desired.key_name:
            params["KeyName"] = desired.key_name
        if desired.root_volume_size is not None:
            ebs: dict[str, Any] = {
                "VolumeSize": desired.root_volume_size,
                "VolumeType": desired.root_volume_type,
                "DeleteOnTermination": True,
            }
            if desired.root_volume_iops is not None:
                ebs["Iops"] = desired.root_volume_iops
            if desired.root_volume_encrypted is not None:
                ebs["Encrypted"] = desired.root_volume_encrypted
            params["BlockDeviceMappings"] = [
                {
                    "DeviceName": desired.root_device_name or self.root_device_name(desired.image_id),
                    "Ebs": ebs,
                }
            ]
        if desired.spot:
            spot: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if desired.spot_max_price is not None:
                spot["MaxPrice"] = desired.spot_max_price
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        if desired.user_data:
            params["UserData"] = desired.user_data
        # after_create: the subnet, groups and instance profile may be moments old.
        response = self.aws.ec2.call("RunInstances", after_create=True, **params)
        return _observed(response["Instances"][0])

    def root_device_name(self, image_id: str) -> str:
        """The AMI's root device (``/dev/sda1``, ``/dev/xvda``…), which a root volume mapping must name.
        An AMI never changes: it is asked once per process (a missing AMI is asked again)."""
        return known_of(self.aws).value(
            ("ami-root-device", image_id), float("inf"), lambda: self._root_device_name(image_id)
        )

    def _root_device_name(self, image_id: str) -> str:
        images = self.aws.ec2.call("DescribeImages", ImageIds=[image_id]).get("Images", [])
        if not images:
            raise InvalidRequest(
                f"ec2:DescribeImages: AMI {image_id} not found",
                "ec2",
                "DescribeImages",
                "InvalidAMIID.NotFound",
            )
        # Every AMI names its root device; an emulator's registered image may not, and /dev/xvda is
        # what EC2 uses for HVM images then.
        return str(images[0].get("RootDeviceName") or DEFAULT_ROOT_DEVICE)

    def describe_by_id(self, resource_id: str) -> Observed | None:
        for instance in self._instances(InstanceIds=[resource_id]):
            if (
                instance["InstanceId"] == resource_id
                and instance.get("State", {}).get("Name") not in GONE_STATES
            ):
                return _observed(instance)
        return None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        reservations = ec2_by_filter(
            self.aws.ec2, "DescribeInstances", "Reservations", "instance-id", resource_ids, DESCRIBE_PAGE
        )
        return {
            i["InstanceId"]: _observed(i)
            for r in reservations
            for i in r.get("Instances", [])
            if i["InstanceId"] in resource_ids and i.get("State", {}).get("Name") not in GONE_STATES
        }

    def parent_of(self, desired: InstanceDesired) -> str | None:
        return desired.subnet_id

    def describe_by_tags(self, tags: Mapping[str, str], desired: InstanceDesired | None) -> list[Observed]:
        filters = [*tag_filters(tags), {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
        found = map(_observed, self._instances(Filters=filters))
        return [o for o in found if o.state in LIVE_STATES and carries(o.tags, tags)]

    def describe_candidates(self, desired: InstanceDesired) -> list[Observed]:
        """Live instances in the desired subnet from the desired AMI and type that no cluster owns."""
        filters = [
            {"Name": "subnet-id", "Values": [desired.subnet_id]},
            {"Name": "image-id", "Values": [desired.image_id]},
            {"Name": "instance-type", "Values": [desired.instance_type]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        found = map(_observed, self._instances(Filters=filters))
        return [o for o in found if o.state in LIVE_STATES and owning_cluster(o.tags) is None]

    def mismatches(self, observed: Observed, desired: InstanceDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "instanceType": (desired.instance_type, found.get("instance_type")),
                "subnetId": (desired.subnet_id, found.get("subnet_id")),
                "imageId": (desired.image_id, found.get("image_id")),
                "keyName": (desired.key_name, found.get("key_name")),
            }
        )

    def is_ready(self, observed: Observed) -> bool:
        return observed.state == "running"

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def update(self, observed: Observed, desired: InstanceDesired) -> bool:
        """The security groups (an AWSMachine's additional groups are mutable), and the root volume's
        provisioned IOPS where the volume does not have them (an endpoint that ignored them at launch)."""
        changed = False
        wanted = sorted(set(desired.security_group_ids))
        if wanted and sorted(observed.attributes.get("security_group_ids") or []) != wanted:
            self.aws.ec2.call("ModifyInstanceAttribute", InstanceId=observed.id, Groups=wanted)
            observed.attributes["security_group_ids"] = wanted
            changed = True
        volume_id = observed.attributes.get("root_volume_id")
        if desired.root_volume_iops is not None and volume_id:
            volumes = ec2_items(self.aws.ec2, "DescribeVolumes", "Volumes", VolumeIds=[volume_id])
            if volumes and volumes[0].get("Iops") != desired.root_volume_iops:
                self.aws.ec2.call("ModifyVolume", VolumeId=volume_id, Iops=desired.root_volume_iops)
                changed = True
        return changed

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("TerminateInstances", InstanceIds=[resource_id])

    def key_of(self, desired: InstanceDesired) -> str:
        return f"{desired.instance_type} from {desired.image_id} in {desired.subnet_id}"

    def fingerprint(self, desired: InstanceDesired) -> dict[str, str]:
        """The launch parameters an intent records — never the user data, nor a digest of it."""
        fingerprint = {
            "image_id": desired.image_id,
            "instance_type": desired.instance_type,
            "subnet_id": desired.subnet_id,
            "security_group_ids": ",".join(sorted(desired.security_group_ids)),
        }
        if desired.iam_instance_profile:
            fingerprint["iam_instance_profile"] = desired.iam_instance_profile
        if desired.key_name:
            fingerprint["key_name"] = desired.key_name
        if desired.root_volume_size is not None:
            fingerprint["root_volume"] = f"{desired.root_volume_size}GiB {desired.root_volume_type}"
        if desired.public_ip is not None:
            fingerprint["public_ip"] = str(desired.public_ip).lower()
        if desired.spot:
            fingerprint["market"] = (
                f"spot up to {desired.spot_max_price}" if desired.spot_max_price else "spot"
            )
        return fingerprint

    def _instances(self, **params: Any) -> list[dict[str, Any]]:
        reservations = ec2_items(self.aws.ec2, "DescribeInstances", "Reservations", **params)
        return [instance for reservation in reservations for instance in reservation.get("Instances", [])]
