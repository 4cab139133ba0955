"""Cluster API core kinds (``cluster.x-k8s.io/v1beta1``): the subset an infrastructure provider needs."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from capa_py.api.immutable import immutable
from capa_py.api.meta import Condition, FieldIssue, KubeModel, KubeObject, ObjectReference

CLUSTER_API_VERSION = "cluster.x-k8s.io/v1beta1"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
DELETE_FOR_MOVE_ANNOTATION = "clusterctl.cluster.x-k8s.io/delete-for-move"
"""Set by ``clusterctl move`` on each source object just before deleting it: the object lives on elsewhere."""
CLUSTER_FINALIZER = "cluster.cluster.x-k8s.io"
MACHINE_FINALIZER = "machine.cluster.x-k8s.io"

# A cluster name becomes a label value (cluster.x-k8s.io/cluster-name: at most 63 characters), part of tag
# keys (sigs.k8s.io/cluster-api-provider-aws/cluster/<name>, at most 128) and the start of security group
# names, which AWS refuses when they begin with "sg-". Load balancer and target group names derived from it
# are sanitised instead (see controllers.services.loadbalancer.aws_name).
MAX_CLUSTER_NAME = 63


def cluster_name_issues(name: str, path: str = "metadata.name") -> list[FieldIssue]:
    """Why ``name`` cannot name a cluster whose AWS resources carry it (empty when it can)."""
    issues: list[FieldIssue] = []
    if len(name) > MAX_CLUSTER_NAME:
        issues.append(
            FieldIssue(
                path=path,
                message=(
                    f"a cluster name is at most {MAX_CLUSTER_NAME} characters (it is a label value and "
                    f"part of AWS tag keys); {name!r} has {len(name)}"
                ),
            )
        )
    if name.startswith("sg-"):
        issues.append(
            FieldIssue(
                path=path,
                message="a cluster name must not start with 'sg-': AWS refuses security group names sg-*",
            )
        )
    return issues


class NetworkRanges(KubeModel):
    cidr_blocks: list[str] = Field(default_factory=list)


class ClusterNetwork(KubeModel):
    api_server_port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("api_server_port")
    @classmethod
    def _only_the_port_capa_py_serves(cls, value: int | None) -> int | None:
        # The load balancer's listener, target group and security-group rules all use 6443.
        if value is not None and value != 6443:
            raise ValueError(
                f"only 6443 is supported (the API server load balancer listens there), not {value}"
            )
        return value

    services: NetworkRanges | None = None
    pods: NetworkRanges | None = None
    service_domain: str | None = None


class APIEndpoint(KubeModel):
    host: str = ""
    port: int = Field(default=0, ge=0, le=65535)

    @property
    def is_set(self) -> bool:
        return bool(self.host) and self.port > 0


class ClusterSpec(KubeModel):
    paused: bool = False
    cluster_network: ClusterNetwork | None = None
    control_plane_endpoint: APIEndpoint = Field(default_factory=APIEndpoint)
    control_plane_ref: ObjectReference | None = None
    infrastructure_ref: ObjectReference | None = None


ClusterPhase = Literal["Pending", "Provisioning", "Provisioned", "Deleting", "Failed", "Unknown"]


class ClusterStatus(KubeModel):
    phase: ClusterPhase | None = None
    infrastructure_ready: bool = False
    control_plane_ready: bool = False
    failure_reason: str | None = None
    failure_message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class Cluster(KubeObject):
    API_VERSION: ClassVar[str] = CLUSTER_API_VERSION
    KIND: ClassVar[str] = "Cluster"
    PLURAL: ClassVar[str] = "clusters"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("cl",)

    spec: ClusterSpec = Field(default_factory=ClusterSpec)
    status: ClusterStatus = Field(default_factory=ClusterStatus)

    @property
    def paused(self) -> bool:
        return self.spec.paused or PAUSED_ANNOTATION in self.metadata.annotations

    def semantic_issues(self) -> list[FieldIssue]:
        # Not while deleting: a cluster stored before this rule must still be able to go away.
        return (
            cluster_name_issues(self.metadata.name) if self.metadata.name and not self.being_deleted else []
        )


class Bootstrap(KubeModel):
    config_ref: ObjectReference | None = None
    data_secret_name: str | None = None


class MachineSpec(KubeModel):
    cluster_name: str = Field(min_length=1)
    bootstrap: Bootstrap = Field(default_factory=Bootstrap)
    infrastructure_ref: ObjectReference
    version: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    failure_domain: str | None = None


MachinePhase = Literal[
    "Pending", "Provisioning", "Provisioned", "Running", "Deleting", "Deleted", "Failed", "Unknown"
]


class MachineAddress(KubeModel):
    type: Literal["Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS"]
    address: str


class NodeReference(KubeModel):
    name: str
    uid: str | None = None


class MachineStatus(KubeModel):
    phase: MachinePhase | None = None
    bootstrap_ready: bool = False
    infrastructure_ready: bool = False
    node_ref: NodeReference | None = None
    addresses: list[MachineAddress] = Field(default_factory=list)
    failure_reason: str | None = None
    failure_message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class Machine(KubeObject):
    API_VERSION: ClassVar[str] = CLUSTER_API_VERSION
    KIND: ClassVar[str] = "Machine"
    PLURAL: ClassVar[str] = "machines"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ma",)

    spec: MachineSpec
    status: MachineStatus = Field(default_factory=MachineStatus)

    def immutable_issues(self, old: Machine) -> list[FieldIssue]:
        """As Cluster API: a machine never moves to another cluster."""
        return immutable("spec.clusterName", old.spec.cluster_name, self.spec.cluster_name)

    @property
    def is_control_plane(self) -> bool:
        return CONTROL_PLANE_LABEL in self.metadata.labels

    def infrastructure_name(self, kind: str) -> str | None:
        """The name of the infrastructure object (of ``kind``) this machine's ``spec.infrastructureRef``
        names, if it names one of that kind."""
        ref = self.spec.infrastructure_ref
        return ref.name if ref.kind == kind and ref.name else None
