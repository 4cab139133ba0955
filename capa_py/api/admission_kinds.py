"""The webhook half of a provider's components file, kept as stored objects.

``capa manifests all`` installs the validating webhooks capa-py's controller serves: an
``admissionregistration.k8s.io/v1`` ValidatingWebhookConfiguration (cluster-scoped), and the cert-manager
``cert-manager.io/v1`` Issuer and Certificate that make the serving certificate and inject its CA. ``capa
serve`` stores them, like the workload kinds (:mod:`capa_py.api.workloads`), so ``kubectl apply -f <(capa
manifests all)`` works against it; nothing acts on them there (capa serve runs the same admission itself,
and no cert-manager issues certificates).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from capa_py.api.workloads import AsGiven

CERT_MANAGER_GROUP = "cert-manager.io"
"""cert-manager's API group: its CRDs are cert-manager's own (clusterctl installs it), never capa-py's."""


class ValidatingWebhookConfiguration(AsGiven):
    API_VERSION: ClassVar[str] = "admissionregistration.k8s.io/v1"
    KIND: ClassVar[str] = "ValidatingWebhookConfiguration"
    PLURAL: ClassVar[str] = "validatingwebhookconfigurations"
    NAMESPACED: ClassVar[bool] = False
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("webhooks",)

    webhooks: list[dict[str, Any]] = Field(default_factory=list)


class Issuer(AsGiven):
    API_VERSION: ClassVar[str] = f"{CERT_MANAGER_GROUP}/v1"
    KIND: ClassVar[str] = "Issuer"
    PLURAL: ClassVar[str] = "issuers"
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("spec", "status")

    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class Certificate(AsGiven):
    API_VERSION: ClassVar[str] = f"{CERT_MANAGER_GROUP}/v1"
    KIND: ClassVar[str] = "Certificate"
    PLURAL: ClassVar[str] = "certificates"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("cert", "certs")
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("spec", "status")

    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


ADMISSION_KINDS: tuple[type[AsGiven], ...] = (ValidatingWebhookConfiguration, Issuer, Certificate)
