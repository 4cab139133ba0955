"""``capa manifests``: what a management cluster needs to run capa-py as a Cluster API provider.

- :func:`crds`: a CustomResourceDefinition per custom kind, generated from the models;
- :func:`rbac`: the ``capa-py-system`` Namespace, the ServiceAccount, a ClusterRole with exactly the verbs the
  controllers use, the binding;
- :func:`workload`: the controller Deployment (``capa --store kube controller --leader-elect``, two
  replicas) and its metrics Service;
- :func:`webhook_documents`: the validating webhooks' cert-manager Issuer and Certificate, Service and
  ValidatingWebhookConfiguration (cert-manager must be installed); or, for a controller serving them
  outside the cluster (:class:`ExternalWebhooks`), the configuration alone, calling its URL.

:func:`documents` picks a set; :func:`render` prints documents as one multi-document YAML stream (what
``kubectl apply -f`` reads) or as a JSON ``v1`` ``List``. Output is deterministic: the same version prints
the same bytes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml

from capa_py.defaults import DEFAULT_IMAGE
from capa_py.manifests.crds import crds
from capa_py.manifests.deployment import workload
from capa_py.manifests.rbac import namespace, rbac
from capa_py.manifests.webhooks import ExternalWebhooks, webhook_documents

Selection = Literal["crds", "rbac", "deployment", "webhooks", "all"]
SELECTIONS: tuple[Selection, ...] = ("crds", "rbac", "deployment", "webhooks", "all")


def documents(
    selection: Selection,
    image: str = DEFAULT_IMAGE,
    core: bool = True,
    external: ExternalWebhooks | None = None,
) -> list[dict[str, Any]]:
    """The documents of a selection; ``all`` in the order ``kubectl apply`` needs (Namespace before what
    lives in it, CRDs before anything could use them, the ServiceAccount before the Deployment running as
    it, the webhooks' registration last). ``image`` is the controller's container image (``deployment`` and
    ``all``); ``core=False`` leaves Cluster API core's CRDs out (``crds`` and ``all``); ``external``
    registers webhooks served outside the cluster instead of the pods' (``deployment``, ``webhooks`` and
    ``all``: the pods then serve none, and no cert-manager document is printed)."""
    if selection == "crds":
        return crds(core=core)
    if selection == "rbac":
        return rbac()
    hooks = webhook_documents(external=external)
    if selection == "webhooks":
        return hooks if external is not None else [namespace(), *hooks]
    pods = workload(image, webhooks=external is None)
    if selection == "deployment":
        return [namespace(), *pods, *hooks]
    if selection == "all":
        first, *access = rbac()
        return [first, *crds(core=core), *access, *pods, *hooks]
    raise ValueError(f"unknown selection {selection!r} (expected one of {', '.join(SELECTIONS)})")


def render(docs: list[dict[str, Any]], output: Literal["yaml", "json"] = "yaml") -> str:
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2) + "\n"
    return "".join(
        "---\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120) for doc in docs
    )


__all__ = [
    "DEFAULT_IMAGE",
    "SELECTIONS",
    "ExternalWebhooks",
    "Selection",
    "crds",
    "documents",
    "rbac",
    "render",
    "webhook_documents",
    "workload",
]
