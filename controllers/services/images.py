"""The image of a machine's instance: ``spec.ami.id``, else the newest AMI a lookup finds, as Cluster API
Provider AWS finds it (:mod:`capa_py.api.image_lookup` has the fields and their defaults).

The lookup asks ``DescribeImages`` with CAPA's filters — ``owner-id``, ``name`` (the rendered format),
``architecture`` (the instance type's, from ``DescribeInstanceTypes``: ``x86_64`` or ``arm64``),
``state=available`` and ``virtualization-type=hvm`` — and takes the image with the newest ``CreationDate``.

Both answers are kept in the region's shared knowledge (:mod:`capa_py.cache.known`), so every machine of
the process asks once per key: an instance type's architecture for good (it never changes), a lookup's
answer for :data:`LOOKUP_TTL` (one ``DescribeImages`` per owner, name pattern and architecture in that
window, however many machines ask; a newer image is seen after it). A lookup that finds nothing is not
kept: the next try asks again.

The chosen image is recorded in the AWSMachine's ``status.ami`` before the instance is launched, and the
machine keeps it: a retried launch asks for the same image (its client token and its intent say the same),
and an image published later never replaces the machine's instance. Until the machine has an instance, a
change to what it is looked up by (its spec, its AWSCluster's defaults) looks it up again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Machine
from capa_py.api.image_lookup import ImageLookup, ResolvedImage, lookup_name, lookup_settings
from capa_py.aws.errors import InvalidRequest, NotFound
from capa_py.aws.session import AWSClients
from capa_py.cache.known import known_of
from capa_py.engine.recorder import StatusRecorder
from capa_py.logging import get_logger
from capa_py.store.helpers import retry_on_conflict
from capa_py.tinkerbell.gotemplate import TemplateError

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

LOOKUP_TTL = 300.0
"""How long one lookup's answer serves every machine asking the same (seconds)."""
ARCHITECTURES = ("x86_64", "arm64")
"""The architectures CAPA looks images up for, in its order of preference."""
ROOT_DEVICE_FACT = "ami-root-device"
"""The key under which :class:`resources.instance.Instance` keeps an AMI's root device (a lookup's answer
names it, so the launch need not describe the image again)."""
NO_VERSION_MESSAGE = (
    "spec.ami.id is not set and the Machine has no spec.version: set one of them "
    "(an AMI is looked up by the Machine's Kubernetes version)"
)
_log = get_logger("controller.images")


class AMINotFound(NotFound):
    """No image matches the lookup: the machine waits for one (retried with backoff), nothing is created."""

    def __init__(self, lookup: ImageLookup, settings: str) -> None:
        super().__init__(
            f"no AMI matches {lookup.describe()}, state=available, virtualization-type=hvm ({settings})",
            "ec2",
            "DescribeImages",
            "AMINotFound",
        )


def _filters(lookup: ImageLookup) -> list[dict[str, Any]]:
    return [
        {"Name": "owner-id", "Values": [lookup.owner]},
        {"Name": "name", "Values": [lookup.name]},
        {"Name": "architecture", "Values": [lookup.architecture]},
        {"Name": "state", "Values": ["available"]},
        {"Name": "virtualization-type", "Values": ["hvm"]},
    ]


def instance_type_architecture(aws: AWSClients, instance_type: str) -> str:
    """The architecture images are looked up for on ``instance_type``: the first of x86_64 and arm64 its
    processor supports (``DescribeInstanceTypes``), asked once per process."""

    def read() -> str:
        found = aws.ec2.call("DescribeInstanceTypes", InstanceTypes=[instance_type]).get("InstanceTypes", [])
        supported = found[0].get("ProcessorInfo", {}).get("SupportedArchitectures", []) if found else []
        chosen = next((a for a in supported if a in ARCHITECTURES), None)
        if chosen is None:
            raise InvalidRequest(
                f"spec.instanceType: {instance_type} supports none of {', '.join(ARCHITECTURES)} "
                f"(it supports {', '.join(supported) or 'nothing EC2 names'})",
                "ec2",
                "DescribeInstanceTypes",
                "UnsupportedArchitecture",
            )
        return str(chosen)

    return known_of(aws).value(("instance-type-architecture", instance_type), float("inf"), read)


def newest_image(aws: AWSClients, lookup: ImageLookup, settings: str) -> dict[str, Any]:
    """The image with the newest ``CreationDate`` among those matching ``lookup`` (one ``DescribeImages``
    per lookup per :data:`LOOKUP_TTL`); :class:`AMINotFound` when none does."""

    def read() -> dict[str, Any]:
        images = aws.ec2.call("DescribeImages", Filters=_filters(lookup)).get("Images", [])
        if not images:
            raise AMINotFound(lookup, settings)
        # EC2's CreationDate is ISO 8601 in UTC with a fixed width, so its text orders as its time does.
        newest: dict[str, Any] = max(images, key=lambda i: (str(i.get("CreationDate") or ""), i["ImageId"]))
        return {k: newest.get(k) for k in ("ImageId", "Name", "CreationDate", "RootDeviceName")}

    known = known_of(aws)
    image = known.value(("ami-lookup", lookup.owner, lookup.name, lookup.architecture), LOOKUP_TTL, read)
    if image.get("RootDeviceName"):
        known.learn((ROOT_DEVICE_FACT, image["ImageId"]), str(image["RootDeviceName"]))
    return image


def machine_lookup(
    aws: AWSClients, obj: AWSMachine, machine: Machine, awscluster: AWSCluster
) -> tuple[ImageLookup, str]:
    """What the machine's image is looked up by, and the settings it came from (for messages)."""
    version = machine.spec.version
    if not version:
        raise InvalidRequest(NO_VERSION_MESSAGE, code="MissingAMI")
    lookup_format, org, base_os = lookup_settings(obj.spec, awscluster.spec)
    try:
        name = lookup_name(lookup_format, base_os, version)
    except TemplateError as exc:  # admission refuses such a format; an object stored before may hold one
        raise InvalidRequest(f"spec.imageLookupFormat: {exc}", code="InvalidImageLookupFormat") from exc
    settings = (
        f"imageLookupFormat {lookup_format!r}, imageLookupBaseOS {base_os!r}, Kubernetes version {version}"
    )
    return ImageLookup(org, name, instance_type_architecture(aws, obj.spec.instance_type)), settings


def machine_image(
    aws: AWSClients,
    recorder: StatusRecorder[AWSMachine],
    machine: Machine,
    awscluster: AWSCluster,
    launched: bool,
) -> str:
    """The image the machine's instance is (or is to be) launched from. ``launched``: the machine already
    has an instance (or an interrupted launch's intent), so the recorded image stands whatever a lookup
    would find now. A new lookup's answer is written to ``status.ami`` before this returns."""
    obj = recorder.obj
    if obj.spec.ami.id:
        return obj.spec.ami.id
    recorded = obj.status.ami
    if recorded is not None and launched:
        return recorded.id
    lookup, settings = machine_lookup(aws, obj, machine, awscluster)
    if recorded is not None and recorded.answers(lookup):
        return recorded.id
    image = newest_image(aws, lookup, settings)
    resolved = ResolvedImage(
        id=image["ImageId"],
        name=image.get("Name"),
        creation_date=image.get("CreationDate"),
        owner_id=lookup.owner,
        name_pattern=lookup.name,
        architecture=lookup.architecture,
    )

    def record(o: AWSMachine) -> None:
        o.status.ami = resolved.model_copy()

    # Written now, not with the pass's other status changes: the launch that follows must find it after a
    # crash, so a retried launch asks for this image and no other.
    written = retry_on_conflict(recorder.store, obj, record, status=True)
    record(obj)
    obj.metadata.resource_version = written.metadata.resource_version
    _log.info("machine image looked up", machine=obj.name, image=resolved.id, lookup=lookup.describe())
    return resolved.id


def image_lookup_view(awscluster: AWSCluster) -> Mapping[str, str | None]:
    """What of an AWSCluster a machine's lookup reads: its three defaults."""
    spec = awscluster.spec
    return {
        "format": spec.image_lookup_format,
        "org": spec.image_lookup_org,
        "baseOS": spec.image_lookup_base_os,
    }
