"""Finding an AMI by Kubernetes version, base OS and architecture, as Cluster API Provider AWS does.

An AWSMachine without ``spec.ami.id`` is launched from the newest image whose name matches a pattern made
from ``imageLookupFormat`` (a Go ``text/template`` over ``.BaseOS`` and ``.K8sVersion``), owned by
``imageLookupOrg``, for the architecture of the machine's instance type. Each of the three fields is taken
from the AWSMachine, else from its AWSCluster, else CAPA's default (:data:`DEFAULT_FORMAT`,
:data:`DEFAULT_ORG`, :data:`DEFAULT_BASE_OS`). The Kubernetes version is the owning Machine's
``spec.version`` without its leading ``v`` (CAPA's default format matches the ``v`` with its ``?``).

This module holds the fields' rules and the name pattern; the lookup itself (``DescribeImages``) is the
machine service's (:mod:`controllers.services.images`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field

from capa_py.api.meta import FieldIssue, KubeModel
from capa_py.tinkerbell.gotemplate import TemplateError, execute, parse
from capa_py.tinkerbell.gotemplate.funcs import BUILTINS

DEFAULT_FORMAT = "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*"
"""CAPA's default name format, matching the images CAPA publishes (``capa-ami-ubuntu-24.04-v1.31.0-…``)."""

DEFAULT_ORG = "819546954734"
"""CAPA's default image owner: the CNCF-owned account CAPA's public images are published from."""

DEFAULT_BASE_OS = "ubuntu-24.04"
"""CAPA's default base OS."""

_TEMPLATE_NAME = "imageLookupFormat"
_SAMPLE = {"BaseOS": DEFAULT_BASE_OS, "K8sVersion": "1.31.0"}

_FORMAT = (
    "The AMI name pattern to look up when ami.id is not set: a Go text/template over .BaseOS and "
    ".K8sVersion (the Machine's spec.version without its leading v), with EC2's * and ? wildcards."
)
_ORG = "The AWS account id that owns the images to look up (DescribeImages' owner-id filter)."
_BASE_OS = "The base OS substituted for .BaseOS in the lookup format."
_MACHINE_DEFAULT = "Default: the AWSCluster's, else {}."
_CLUSTER_DEFAULT = "The default of the cluster's machines that set none; without it, {}."


def _description(text: str, default: str, cluster: bool) -> str:
    return f"{text} {(_CLUSTER_DEFAULT if cluster else _MACHINE_DEFAULT).format(default)}"


def lookup_name(lookup_format: str, base_os: str, kubernetes_version: str) -> str:
    """The image name pattern: ``lookup_format`` rendered with Go's ``text/template`` semantics over
    ``.BaseOS`` and ``.K8sVersion`` (the version without its leading ``v``). Raises
    :class:`~capa_py.tinkerbell.gotemplate.TemplateError` as Go would."""
    data = {"BaseOS": base_os, "K8sVersion": kubernetes_version.removeprefix("v")}
    return execute(parse(_TEMPLATE_NAME, lookup_format, BUILTINS), _TEMPLATE_NAME, data)


def format_issue(path: str, lookup_format: str | None) -> FieldIssue | None:
    """Why ``lookup_format`` cannot make a name pattern (it does not parse, or names a field other than
    ``.BaseOS`` and ``.K8sVersion``), or None."""
    if lookup_format is None:
        return None
    if not lookup_format.strip():
        return FieldIssue(path=path, message="must not be empty (leave it out for the default)")
    try:
        rendered = lookup_name(lookup_format, _SAMPLE["BaseOS"], _SAMPLE["K8sVersion"])
    except TemplateError as exc:
        return FieldIssue(
            path=path,
            message=f"not a valid name format ({exc}); it may use {{{{.BaseOS}}}} and {{{{.K8sVersion}}}}",
        )
    if not rendered.strip():
        return FieldIssue(path=path, message=f"{lookup_format!r} makes an empty name pattern")
    return None


class LookupFields(Protocol):
    """The three lookup fields an AWSMachine's spec and an AWSCluster's spec share (CAPA's names)."""

    image_lookup_format: str | None
    image_lookup_org: str | None
    image_lookup_base_os: str | None


def format_field(cluster: bool = False) -> Any:
    """The ``imageLookupFormat`` field of an AWSMachine's spec (of an AWSCluster's: ``cluster``)."""
    return Field(default=None, description=_description(_FORMAT, DEFAULT_FORMAT, cluster))


def org_field(cluster: bool = False) -> Any:
    return Field(default=None, description=_description(_ORG, f"{DEFAULT_ORG} (CAPA's images)", cluster))


def base_os_field(cluster: bool = False) -> Any:
    return Field(
        default=None, alias="imageLookupBaseOS", description=_description(_BASE_OS, DEFAULT_BASE_OS, cluster)
    )


def lookup_issues(spec: LookupFields, base: str) -> list[FieldIssue]:
    """The lookup fields' issues, named under ``base`` (``spec``)."""
    issues: list[FieldIssue] = []
    problem = format_issue(f"{base}.imageLookupFormat", spec.image_lookup_format)
    if problem is not None:
        issues.append(problem)
    for name, value in (
        ("imageLookupOrg", spec.image_lookup_org),
        ("imageLookupBaseOS", spec.image_lookup_base_os),
    ):
        if value is not None and not value.strip():
            issues.append(
                FieldIssue(path=f"{base}.{name}", message="must not be empty (leave it out for the default)")
            )
    return issues


@dataclass(frozen=True)
class ImageLookup:
    """What one machine's image is looked up by: the owner, the name pattern and the architecture."""

    owner: str
    name: str
    architecture: str

    def describe(self) -> str:
        return f"owner-id={self.owner}, name={self.name}, architecture={self.architecture}"


def lookup_settings(machine: LookupFields, cluster: LookupFields) -> tuple[str, str, str]:
    """(format, org, base OS) for a machine: each of its own, else its cluster's, else CAPA's default."""
    return (
        machine.image_lookup_format or cluster.image_lookup_format or DEFAULT_FORMAT,
        machine.image_lookup_org or cluster.image_lookup_org or DEFAULT_ORG,
        machine.image_lookup_base_os or cluster.image_lookup_base_os or DEFAULT_BASE_OS,
    )


class ResolvedImage(KubeModel):
    """The image a lookup chose for the machine's instance, recorded before the instance is launched: the
    machine keeps it (an image published later does not replace its instance, and a retried launch asks
    for the same image)."""

    id: str = Field(description="The AMI the instance is launched from.")
    name: str | None = Field(default=None, description="The AMI's name.")
    creation_date: str | None = Field(default=None, description="When the AMI was made (EC2's CreationDate).")
    owner_id: str = Field(alias="ownerID", description="The owner-id filter of the lookup.")
    name_pattern: str = Field(description="The name filter of the lookup (the rendered imageLookupFormat).")
    architecture: str = Field(description="The architecture filter of the lookup (from the instance type).")

    def answers(self, lookup: ImageLookup) -> bool:
        return (self.owner_id, self.name_pattern, self.architecture) == (
            lookup.owner,
            lookup.name,
            lookup.architecture,
        )


__all__ = [
    "DEFAULT_BASE_OS",
    "DEFAULT_FORMAT",
    "DEFAULT_ORG",
    "ImageLookup",
    "LookupFields",
    "ResolvedImage",
    "base_os_field",
    "format_field",
    "format_issue",
    "lookup_issues",
    "lookup_name",
    "lookup_settings",
    "org_field",
]
