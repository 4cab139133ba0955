"""Cluster API Provider AWS's template kinds (``infrastructure.cluster.x-k8s.io/v1beta2``).

An ``AWSMachineTemplate`` (short name ``awsmt``) is what a MachineDeployment, a MachineSet or a
KubeadmControlPlane makes AWSMachines from; an ``AWSClusterTemplate`` (``awsct``) what a ClusterClass makes
AWSClusters from. Both hold ``spec.template.metadata`` (labels, annotations) and ``spec.template.spec``,
exactly the spec of the kind they stamp out, validated as that kind validates it; the spec never changes
after create (:mod:`capa_py.api.templates`).

Cluster API Provider AWS's AWSMachineTemplate also has a ``status`` (``capacity`` and ``nodeInfo`` for the
cluster autoscaler's scale from zero, conditions): capa-py fills none of it, so the kind has no status.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from capa_py.api.aws import INFRA_API_VERSION, AWSCluster, AWSClusterSpec, AWSMachine, AWSMachineSpec
from capa_py.api.meta import KubeModel, KubeObject
from capa_py.api.templates import InfrastructureTemplate, TemplateResource


class AWSMachineTemplateResource(TemplateResource):
    """Each AWSMachine made from the template: its labels and annotations, and its spec."""

    spec: AWSMachineSpec = Field(description="The spec of each AWSMachine made from the template.")


class AWSMachineTemplateSpec(KubeModel):
    """Immutable after create: a changed template is a new template."""

    template: AWSMachineTemplateResource


class AWSMachineTemplate(InfrastructureTemplate):
    """The AWSMachine a MachineDeployment, MachineSet or KubeadmControlPlane stamps out for each Machine.

    ``spec.template.spec`` is an AWSMachine's spec, validated as one; ``providerID``, ``instanceID`` and
    ``cloudInit.secretPrefix``/``secretCount`` (where one machine's bootstrap data is) name one instance and
    cannot be set. The spec cannot change after create."""

    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    KIND: ClassVar[str] = "AWSMachineTemplate"
    PLURAL: ClassVar[str] = "awsmachinetemplates"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsmt",)
    TEMPLATED_KIND: ClassVar[str] = "AWSMachine"
    TEMPLATED_MODEL: ClassVar[type[KubeObject]] = AWSMachine
    INSTANCE_ONLY_FIELDS: ClassVar[tuple[str, ...]] = (
        "providerID",
        "instanceID",
        "cloudInit.secretPrefix",
        "cloudInit.secretCount",
    )

    spec: AWSMachineTemplateSpec


class AWSClusterTemplateResource(TemplateResource):
    """Each AWSCluster made from the template: its labels and annotations, and its spec."""

    spec: AWSClusterSpec = Field(description="The spec of each AWSCluster made from the template.")


class AWSClusterTemplateSpec(KubeModel):
    """Immutable after create: a changed template is a new template."""

    template: AWSClusterTemplateResource


class AWSClusterTemplate(InfrastructureTemplate):
    """The AWSCluster a ClusterClass stamps out for each Cluster of its topology.

    ``spec.template.spec`` is an AWSCluster's spec, validated as one. The spec cannot change after
    create."""

    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    KIND: ClassVar[str] = "AWSClusterTemplate"
    PLURAL: ClassVar[str] = "awsclustertemplates"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsct",)
    TEMPLATED_KIND: ClassVar[str] = "AWSCluster"
    TEMPLATED_MODEL: ClassVar[type[KubeObject]] = AWSCluster

    spec: AWSClusterTemplateSpec


AWS_TEMPLATE_KINDS: tuple[type[InfrastructureTemplate], ...] = (AWSClusterTemplate, AWSMachineTemplate)

__all__ = [
    "AWS_TEMPLATE_KINDS",
    "AWSClusterTemplate",
    "AWSClusterTemplateResource",
    "AWSClusterTemplateSpec",
    "AWSMachineTemplate",
    "AWSMachineTemplateResource",
    "AWSMachineTemplateSpec",
]
