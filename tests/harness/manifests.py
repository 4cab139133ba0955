"""Small manifests the CLI and audit tests write: a Cluster and its AWSCluster, on a network of their own."""

from __future__ import annotations

_CLUSTER = """\
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: {name}, namespace: default}}
spec:
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: AWSCluster, name: {name}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSCluster
metadata: {{name: {name}, namespace: default}}
spec:
  region: us-east-1
  network:
{network}
"""


def cluster_documents(name: str, network: str) -> str:
    """The Cluster and AWSCluster ``name`` in ``default`` (region us-east-1); ``network`` is the YAML under
    ``spec.network``, indented by four spaces."""
    return _CLUSTER.format(name=name, network=network.rstrip("\n"))
