"""The validating webhooks in a management cluster: their Service, registration and serving certificate.

The controller pods serve the webhooks (``capa controller --webhook-cert-dir``, :mod:`capa_py.webhooks`) on
:data:`~capa_py.manifests.deployment.WEBHOOK_PORT`; the API server reaches them through the Service
:data:`WEBHOOK_SERVICE` (443 → the pods' ``webhook-server`` port), as registered by the
ValidatingWebhookConfiguration :data:`WEBHOOK_CONFIGURATION`: one webhook per custom kind, at the path its
handler serves, for CREATE and UPDATE.

The serving certificate comes from cert-manager, as in Cluster API Provider AWS's components: a
self-signed Issuer, a Certificate for the Service's DNS names written to the Secret the Deployment mounts,
and the ``cert-manager.io/inject-ca-from`` annotation that has cert-manager's CA injector put that
certificate's CA into every webhook's ``clientConfig.caBundle``. cert-manager must therefore be installed
first (``clusterctl init`` installs it).

A controller running outside the cluster (``capa controller --webhook-cert-dir`` on a workstation) is
registered by URL instead (:class:`ExternalWebhooks`): each webhook calls ``<url><its path>`` and trusts the
CA given in ``caBundle``, as envtest registers a local webhook server; there is then nothing for
cert-manager to issue and no Service to route through.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from capa_py.api.admission_kinds import CERT_MANAGER_GROUP
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.manifests.deployment import SELECTOR, WEBHOOK_CERT_SECRET, labels
from capa_py.manifests.rbac import NAMESPACE, object_metadata

WEBHOOK_SERVICE = "capa-py-webhook-service"
WEBHOOK_CONFIGURATION = "capa-py-validating-webhook-configuration"
ISSUER = "capa-py-selfsigned-issuer"
CERTIFICATE = "capa-py-serving-cert"
SERVICE_PORT = 443
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
CERT_MANAGER_API_VERSION = f"{CERT_MANAGER_GROUP}/v1"


@dataclass(frozen=True)
class ExternalWebhooks:
    """Webhooks served outside the cluster: ``url`` (``https://HOST:PORT``, no path) and the PEM of the CA
    that signed its serving certificate."""

    url: str
    ca_pem: bytes

    def __post_init__(self) -> None:
        if not self.url.startswith("https://") or "?" in self.url or "#" in self.url:
            raise ValueError(f"the webhook URL must be https://HOST[:PORT] with no query, not {self.url!r}")
        if b"-----BEGIN CERTIFICATE-----" not in self.ca_pem:
            raise ValueError("the webhook CA must be a PEM certificate")

    def client_config(self, path: str) -> dict[str, Any]:
        return {"url": self.url.rstrip("/") + path, "caBundle": base64.b64encode(self.ca_pem).decode()}


def service_dns_names() -> list[str]:
    """The names the API server calls the webhook Service by: the serving certificate's subject names."""
    base = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
    return [base, f"{base}.cluster.local"]


def webhook_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "labels": labels()},
        "spec": {
            "selector": dict(SELECTOR),
            "ports": [
                {"name": "webhook", "port": SERVICE_PORT, "targetPort": "webhook-server", "protocol": "TCP"}
            ],
        },
    }


def issuer() -> dict[str, Any]:
    return {
        "apiVersion": CERT_MANAGER_API_VERSION,
        "kind": "Issuer",
        "metadata": object_metadata(ISSUER, NAMESPACE),
        "spec": {"selfSigned": {}},
    }


def certificate() -> dict[str, Any]:
    return {
        "apiVersion": CERT_MANAGER_API_VERSION,
        "kind": "Certificate",
        "metadata": object_metadata(CERTIFICATE, NAMESPACE),
        "spec": {
            "dnsNames": service_dns_names(),
            "issuerRef": {"kind": "Issuer", "name": ISSUER},
            "secretName": WEBHOOK_CERT_SECRET,
        },
    }


def validating_webhook_configuration(
    registry: KindRegistry = REGISTRY, external: ExternalWebhooks | None = None
) -> dict[str, Any]:
    """One webhook per provider kind the controller validates, named ``validation.<kind>.<group>``,
    calling the webhook Service (its CA injected by cert-manager) or, with ``external``, that URL.

    Cluster API core's kinds are not registered, even though the controller serves their paths: where
    Cluster API is installed its own webhooks judge Clusters and Machines (which carry fields capa-py's
    stand-in models do not know, such as ``spec.topology``), and a failing capa-py webhook must never block
    them."""
    from capa_py.apiserver.discovery import group_version
    from capa_py.manifests.crds import is_core_kind
    from capa_py.webhooks import validate_path, validated_kinds

    webhooks = []
    for model in validated_kinds(registry):
        if is_core_kind(model):
            continue
        group, version = group_version(model)
        webhooks.append(
            {
                "name": f"validation.{model.KIND.lower()}.{group}",
                "admissionReviewVersions": ["v1"],
                "clientConfig": (
                    external.client_config(validate_path(model))
                    if external is not None
                    else {
                        "service": {
                            "name": WEBHOOK_SERVICE,
                            "namespace": NAMESPACE,
                            "path": validate_path(model),
                            "port": SERVICE_PORT,
                        }
                    }
                ),
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "rules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [model.PLURAL],
                        # The API server's default, written out: the rules list is replaced whole on
                        # apply, so a default missing here made every re-apply `configured`.
                        "scope": "*",
                    }
                ],
                "sideEffects": "None",
            }
        )
    metadata = object_metadata(WEBHOOK_CONFIGURATION)
    if external is None:
        metadata["annotations"] = {INJECT_CA_FROM: f"{NAMESPACE}/{CERTIFICATE}"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": webhooks,
    }


def webhook_documents(
    registry: KindRegistry = REGISTRY, external: ExternalWebhooks | None = None
) -> list[dict[str, Any]]:
    """The Issuer and Certificate (the Secret the pods mount), the Service, then the registration; with
    ``external``, the registration alone."""
    if external is not None:
        return [validating_webhook_configuration(registry, external)]
    return [issuer(), certificate(), webhook_service(), validating_webhook_configuration(registry)]
