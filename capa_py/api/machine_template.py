"""The Machine template of a MachineDeployment or a MachineSet (``spec.template``): its model, the hash that
tells Machines of one template from another's, and the defaulting and admission rules the two kinds share
(the rules are described in :mod:`capa_py.api.machinesets`)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import Field

from capa_py.api.cluster import CLUSTER_NAME_LABEL, MachineSpec
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject
from capa_py.api.tinkerbell_capi import LabelSelector

_SEMVER = re.compile(
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of generated name suffixes and hashes (no vowels, no look-alikes)."""


def encode_digest(digest: bytes, length: int) -> str:
    return "".join(SUFFIX_ALPHABET[b % len(SUFFIX_ALPHABET)] for b in digest[:length])


def template_hash(template: MachineTemplateSpec) -> str:
    """What makes Machines of a template different ones: the version, failure domain, bootstrap and the
    infrastructure template (group, kind and name). Labels and annotations are not part of it: changing
    them does not replace Machines."""
    spec = template.spec
    ref = spec.infrastructure_ref
    material: dict[str, Any] = {
        "version": spec.version,
        "failureDomain": spec.failure_domain,
        "bootstrap": spec.bootstrap.model_dump(mode="json", by_alias=True, exclude_none=True),
        "infrastructureRef": {
            "group": (ref.api_version or "").rpartition("/")[0],
            "kind": ref.kind,
            "name": ref.name,
        },
    }
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).digest()
    return encode_digest(digest, 10)


class MachineTemplateMetadata(KubeModel):
    """What a template gives every Machine it makes: labels and annotations."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class MachineTemplateSpec(KubeModel):
    metadata: MachineTemplateMetadata = Field(default_factory=MachineTemplateMetadata)
    spec: MachineSpec


class ReplicatedSpec(KubeModel):
    """What a MachineDeployment, a MachineSet and a MachinePool ask for alike: a cluster, a replica count
    (default 1), a Machine template and how long a new one must be ready to count as available."""

    cluster_name: str = Field(min_length=1)
    replicas: int | None = Field(default=None, ge=0)
    template: MachineTemplateSpec
    min_ready_seconds: int | None = Field(default=None, ge=0)

    @property
    def desired(self) -> int:
        return 1 if self.replicas is None else self.replicas


def default_replicated(owner: KubeObject, spec: ReplicatedSpec) -> None:
    """The defaults the three kinds share: the cluster label, one replica, the template's defaults."""
    owner.metadata.labels[CLUSTER_NAME_LABEL] = spec.cluster_name
    if spec.replicas is None:
        spec.replicas = 1
    default_template(owner, spec.cluster_name, spec.template)


def _issue(path: str, message: str) -> FieldIssue:
    return FieldIssue(path=path, message=message)


def template_issues(
    owner: KubeObject, selector: LabelSelector, template: MachineTemplateSpec
) -> list[FieldIssue]:
    """The admission rules a MachineDeployment and a MachineSet share."""
    found: list[FieldIssue] = []
    if not _LABEL_VALUE.match(owner.name) or len(owner.name) > 63:
        found.append(
            _issue(
                "metadata.name",
                "must be a valid label value (at most 63 characters, alphanumerics, '-', '_', '.')",
            )
        )
    selector_issues = selector.issues("spec.selector")
    found += selector_issues
    if not selector_issues and not selector.matches(template.metadata.labels):
        found.append(
            _issue("spec.template.metadata.labels", f"must match spec.selector {str(selector.selector())!r}")
        )
    version = template.spec.version
    if version is not None and not _SEMVER.match(version):
        found.append(_issue("spec.template.spec.version", f"{version!r} must be a valid semantic version"))
    if template.spec.bootstrap.config_ref is not None:
        found.append(
            _issue(
                "spec.template.spec.bootstrap.configRef",
                "capa-py's Cluster API core has no bootstrap provider to clone a bootstrap config from: "
                "set spec.template.spec.bootstrap.dataSecretName (a Secret holding the bootstrap data)",
            )
        )
    ref = template.spec.infrastructure_ref
    if not ref.api_version or not ref.kind or not ref.name:
        found.append(_issue("spec.template.spec.infrastructureRef", "apiVersion, kind and name are required"))
    return found


def default_template(owner: KubeObject, cluster_name: str, template: MachineTemplateSpec) -> None:
    """The defaults a MachineDeployment and a MachineSet give their template."""
    template.metadata.labels[CLUSTER_NAME_LABEL] = cluster_name
    spec = template.spec
    if spec.version is not None and spec.version and not spec.version.startswith("v"):
        spec.version = "v" + spec.version
    if not spec.infrastructure_ref.namespace and owner.namespace:
        spec.infrastructure_ref.namespace = owner.namespace
