"""The components the cluster lifecycle workflows install on a cluster, split by who installs them.

*Install … Components* installs capa-py's own components first, then asks each provider for its own
(``capa_py.workflow.provider``). On a cluster that is not the bootstrap cluster these are the documents
applied to its API server:

- :func:`core_components`: the ``capa-py-system`` Namespace, the RBAC, the CRDs of the kinds no provider owns
  (Cluster API core's Cluster and Machine, capa-py's ClusterConfig), and the one controller Deployment
  with its metrics Service. Every provider's controllers run in that Deployment: its ``--providers`` flag
  names the providers of the cluster (and, for Tinkerbell, where the workflow service and Hegel listen).
  The webhook server is left out (it needs cert-manager's certificate; ``capa manifests all`` has it).
- :func:`provider_components`: a provider's CRDs, and for Tinkerbell the Service in front of the workflow
  service and Hegel that the machines' agents reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import IDENTITY_KINDS
from capa_py.api.aws_templates import AWS_TEMPLATE_KINDS
from capa_py.api.clusterconfig import ProviderName, TinkerbellComponentsSpec
from capa_py.api.machinepool import AWSMachinePool
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import TINKERBELL_KINDS
from capa_py.api.tinkerbell_capi import TINKERBELL_CAPI_KINDS
from capa_py.defaults import DEFAULT_IMAGE
from capa_py.manifests.crds import crd_for, custom_kinds
from capa_py.manifests.deployment import SELECTOR, deployment, labels, metrics_service
from capa_py.manifests.rbac import NAMESPACE, rbac

PROVIDER_KINDS: dict[ProviderName, tuple[type[KubeObject], ...]] = {
    "aws": (AWSCluster, AWSMachine, AWSMachinePool, *AWS_TEMPLATE_KINDS, *IDENTITY_KINDS),
    "tinkerbell": (*TINKERBELL_KINDS, *TINKERBELL_CAPI_KINDS),
}
"""The kinds each provider owns (and installs the CRDs of)."""

TINKERBELL_SERVICE = "capa-py-tinkerbell"


def core_kinds() -> list[type[KubeObject]]:
    """The custom kinds no provider owns."""
    owned = {k for kinds in PROVIDER_KINDS.values() for k in kinds}
    return [k for k in custom_kinds() if k not in owned]


def controller_args(
    providers: Sequence[ProviderName], tinkerbell: TinkerbellComponentsSpec | None
) -> list[str]:
    """The flags that make the one controller Deployment run the given providers' controllers."""
    args = [f"--providers={','.join(providers)}"]
    if "tinkerbell" in providers:
        spec = tinkerbell or TinkerbellComponentsSpec()
        args += [
            f"--tink-server-port={spec.server_port}",
            "--tink-server-bind=0.0.0.0",
            f"--hegel-port={spec.hegel_port}",
            "--hegel-bind=0.0.0.0",
        ]
        if spec.allow_unauthenticated_agents:
            args.append("--tink-server-allow-unauthenticated-agents")
    return args


def core_components(
    providers: Sequence[ProviderName],
    tinkerbell: TinkerbellComponentsSpec | None = None,
    image: str = DEFAULT_IMAGE,
) -> list[dict[str, Any]]:
    """capa-py's own components, in the order they can be applied (Namespace first, CRDs before use)."""
    first, *access = rbac()
    ports: list[dict[str, Any]] = []
    if "tinkerbell" in providers:
        spec = tinkerbell or TinkerbellComponentsSpec()
        ports = [
            {"name": "tink-server", "containerPort": spec.server_port, "protocol": "TCP"},
            {"name": "hegel", "containerPort": spec.hegel_port, "protocol": "TCP"},
        ]
    return [
        first,
        *(crd_for(kind) for kind in core_kinds()),
        *access,
        deployment(image, controller_args(providers, tinkerbell), ports, webhooks=False),
        metrics_service(),
    ]


def provider_components(
    provider: ProviderName, tinkerbell: TinkerbellComponentsSpec | None = None
) -> list[dict[str, Any]]:
    """One provider's components: its CRDs, and the Tinkerbell services' Service."""
    docs = [crd_for(kind) for kind in custom_kinds() if kind in PROVIDER_KINDS[provider]]
    if provider == "tinkerbell":
        spec = tinkerbell or TinkerbellComponentsSpec()
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": TINKERBELL_SERVICE, "namespace": NAMESPACE, "labels": labels()},
                "spec": {
                    "selector": dict(SELECTOR),
                    "ports": [
                        {"name": "tink-server", "port": spec.server_port, "targetPort": "tink-server"},
                        {"name": "hegel", "port": spec.hegel_port, "targetPort": "hegel"},
                    ],
                },
            }
        )
    return docs
