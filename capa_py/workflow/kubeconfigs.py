"""A workload cluster's kubeconfig, as Cluster API publishes it: the ``<cluster>-kubeconfig`` Secret's
``value`` key."""

from __future__ import annotations

from typing import Any

import yaml

from capa_py.api.core import Secret
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from capa_py.workflow.manifest_read import ManifestError, yaml_problem

KUBECONFIG_KEY = "value"
"""The data key of Cluster API's ``<cluster>-kubeconfig`` Secret that holds the kubeconfig."""


def kubeconfig_secret_name(cluster: str) -> str:
    """Cluster API's name for the Secret holding a cluster's admin kubeconfig."""
    return f"{cluster}-kubeconfig"


def kubeconfig_from_secret(secret: Secret) -> dict[str, Any]:
    """The kubeconfig a Cluster API ``<cluster>-kubeconfig`` Secret holds under data key ``value``."""
    where = f"{secret.ref()} key {KUBECONFIG_KEY!r}"
    try:
        raw = secret.value(KUBECONFIG_KEY)
    except KeyError as exc:
        raise ManifestError(f"{where}: missing; it holds no kubeconfig") from exc
    try:
        parsed = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 text") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{where}: not a YAML kubeconfig: {yaml_problem(exc)}") from exc
    if not isinstance(parsed, dict) or not isinstance(parsed.get("clusters"), list):
        raise ManifestError(f"{where}: not a kubeconfig (no clusters list)")
    return parsed


def cluster_kubeconfig(store: ObjectStore, namespace: str, cluster: str) -> dict[str, Any] | None:
    """The kubeconfig in Secret ``<cluster>-kubeconfig`` of ``namespace``, or None while there is none
    (the cluster's control plane has not published it yet)."""
    secret = get_or_none(store, Secret, kubeconfig_secret_name(cluster), namespace)
    return None if secret is None else kubeconfig_from_secret(secret)
