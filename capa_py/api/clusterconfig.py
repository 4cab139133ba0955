"""``ClusterConfig`` (``capa-py.io/v1alpha1``): what ``capa cluster create|upgrade|delete`` needs to know
about a cluster beyond its Cluster API objects.

A cluster file holds one ClusterConfig and the cluster's objects (a Cluster, its infrastructure, Machines...).
The config names the infrastructure provider whose components the workflows install, the CNI manifest the
*Install Networking* task applies to the new cluster, and, for clusters without a control-plane provider, the
kubeconfig of the cluster's API server. *Install Cluster Configuration* stores the ClusterConfig in the
management cluster, and *Install capa-py Components* in a workload cluster, so that later operations can
tell what a cluster was made from.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from capa_py.api.meta import FieldIssue, KubeModel, KubeObject

CAPA_GROUP = "capa-py.io"
CAPA_API_VERSION = f"{CAPA_GROUP}/v1alpha1"

ProviderName = Literal["aws", "tinkerbell"]


class NetworkingSpec(KubeModel):
    cni_manifest: str | None = None
    """The CNI to install on the new cluster: a file (relative to the cluster file) or an http(s) URL of a
    multi-document YAML manifest. Without one, the workflows have no *Install Networking* task."""


class ControlPlaneSpec(KubeModel):
    kubeconfig_file: str | None = None
    """For a cluster no control-plane provider brings up (capa-py ships none): a kubeconfig file (relative to
    the cluster file) of the cluster's API server. Once the cluster's infrastructure is ready, the workflow
    stores it as the ``<cluster>-kubeconfig`` Secret, as a control-plane provider would. Without it, the
    workflow waits for that Secret to be written by the control-plane provider."""


class TinkerbellComponentsSpec(KubeModel):
    server_port: int = Field(default=42113, ge=1, le=65535)
    """The port of the Tinkerbell workflow service the bootstrap cluster serves (and the management
    cluster's components expose). Agents connect to it."""
    hegel_port: int = Field(default=50061, ge=1, le=65535)
    """The port of the Hegel metadata service."""
    bind: str = "127.0.0.1"
    """The address the bootstrap cluster's workflow service and Hegel listen on."""
    allow_unauthenticated_agents: bool = False
    """Let agents that present no credentials claim Hardware without ``spec.agentCredentialsRef`` by its
    name or MAC (upstream Tinkerbell's behaviour), on the bootstrap cluster's workflow service and the
    management cluster's (``--tink-server-allow-unauthenticated-agents``). Off: such agents are refused."""


class ClusterConfigSpec(KubeModel):
    provider: ProviderName
    """The infrastructure provider: ``aws`` (AWSCluster/AWSMachine) or ``tinkerbell``
    (TinkerbellCluster/TinkerbellMachine). The Cluster's ``spec.infrastructureRef`` must be of its kind."""
    networking: NetworkingSpec = Field(default_factory=NetworkingSpec)
    control_plane: ControlPlaneSpec = Field(default_factory=ControlPlaneSpec)
    tinkerbell: TinkerbellComponentsSpec | None = None
    """Where the Tinkerbell components listen (``provider: tinkerbell`` only; defaults apply when absent)."""


class ClusterConfig(KubeObject):
    """The configuration a cluster was created from; its name is the cluster's name."""

    API_VERSION: ClassVar[str] = CAPA_API_VERSION
    KIND: ClassVar[str] = "ClusterConfig"
    PLURAL: ClassVar[str] = "clusterconfigs"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ccfg",)
    HAS_STATUS: ClassVar[bool] = False

    spec: ClusterConfigSpec

    def semantic_issues(self) -> list[FieldIssue]:
        issues: list[FieldIssue] = []
        if self.spec.tinkerbell is not None and self.spec.provider != "tinkerbell":
            issues.append(
                FieldIssue(
                    path="spec.tinkerbell", message="only for provider tinkerbell, not " + self.spec.provider
                )
            )
        cni = self.spec.networking.cni_manifest
        if cni is not None and not cni.strip():
            issues.append(FieldIssue(path="spec.networking.cniManifest", message="must not be empty"))
        return issues

    @property
    def tinkerbell_components(self) -> TinkerbellComponentsSpec:
        return self.spec.tinkerbell if self.spec.tinkerbell is not None else TinkerbellComponentsSpec()
