"""Core (``v1``) kinds: the bootstrap data Secret providers read, Namespace, ConfigMap and Event."""

from __future__ import annotations

import base64
import binascii
from typing import ClassVar

from pydantic import Field, field_validator

from capa_py.api.coordination import MicroTime
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject, Time, validate_dns_label


def check_base64(field: str, values: dict[str, str]) -> dict[str, str]:
    """``values`` unchanged when every value is base64 (what the wire form of binary data is)."""
    for key, encoded in values.items():
        try:
            base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{field}[{key!r}] is not valid base64") from exc
    return values


class Secret(KubeObject):
    """A ``v1`` Secret. ``data`` values are base64 on the wire, as in Kubernetes.

    Secrets carry bootstrap user data: never log their content.
    """

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Secret"
    PLURAL: ClassVar[str] = "secrets"
    HAS_STATUS: ClassVar[bool] = False

    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict)
    immutable: bool | None = None

    @field_validator("data")
    @classmethod
    def _check_base64(cls, value: dict[str, str]) -> dict[str, str]:
        return check_base64("data", value)

    def normalise(self) -> None:
        """Fold ``stringData`` into ``data`` as the API server does on write."""
        for key, value in self.string_data.items():
            self.data[key] = base64.b64encode(value.encode()).decode()
        self.string_data = {}

    def value(self, key: str) -> bytes:
        """The decoded value of one key (``stringData`` first, as it wins on write)."""
        if key in self.string_data:
            return self.string_data[key].encode()
        if key not in self.data:
            raise KeyError(f"{self.ref()} has no key {key!r}")
        return base64.b64decode(self.data[key])


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server keeps on every Namespace: its name."""


class NamespaceSpec(KubeModel):
    finalizers: list[str] = Field(default_factory=list)


class NamespaceStatus(KubeModel):
    phase: str | None = None


class Namespace(KubeObject):
    """A ``v1`` Namespace, stored so that ``kubectl create namespace`` and ``get namespaces`` work; a new
    one is Active and labelled with its name, as the API server makes it.

    Nothing checks that a namespaced object's namespace exists, and deleting a Namespace does not delete
    what is in it (there is no namespace lifecycle).
    """

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Namespace"
    PLURAL: ClassVar[str] = "namespaces"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ns",)
    NAMESPACED: ClassVar[bool] = False

    spec: NamespaceSpec = Field(default_factory=NamespaceSpec)
    status: NamespaceStatus = Field(default_factory=NamespaceStatus)

    @classmethod
    def check_name(cls, name: str) -> str:
        return validate_dns_label(name)

    def semantic_issues(self) -> list[FieldIssue]:
        """A Namespace's name is an RFC 1123 label (its objects carry it in ``metadata.namespace``)."""
        try:
            validate_dns_label(self.metadata.name)
        except ValueError as exc:
            return [FieldIssue(path="metadata.name", message=str(exc))]
        return []

    def prepare_for_create(self) -> None:
        """As the API server's namespace strategy: the ``kubernetes`` finalizer, phase Active, and the
        ``kubernetes.io/metadata.name`` label namespace selectors match on."""
        if "kubernetes" not in self.spec.finalizers:
            self.spec.finalizers.append("kubernetes")
        self.status.phase = "Active"
        self.prepare_for_update()

    def prepare_for_update(self) -> None:
        self.metadata.labels[NAMESPACE_NAME_LABEL] = self.metadata.name


class ConfigMap(KubeObject):
    """A ``v1`` ConfigMap: plain configuration data (``binaryData`` values are base64 on the wire)."""

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "ConfigMap"
    PLURAL: ClassVar[str] = "configmaps"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("cm",)
    HAS_STATUS: ClassVar[bool] = False

    data: dict[str, str] = Field(default_factory=dict)
    binary_data: dict[str, str] = Field(default_factory=dict)
    immutable: bool | None = None

    @field_validator("binary_data")
    @classmethod
    def _check_base64(cls, value: dict[str, str]) -> dict[str, str]:
        return check_base64("binaryData", value)


class FullObjectReference(KubeModel):
    """A ``corev1.ObjectReference`` with every field (an Event's ``involvedObject`` and ``related``)."""

    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class EventSource(KubeModel):
    component: str | None = None
    host: str | None = None


class EventSeries(KubeModel):
    count: int | None = None
    last_observed_time: MicroTime | None = None


class Event(KubeObject):
    """A ``v1`` Event: what happened to an object (``involvedObject``), for ``kubectl describe``.

    ``type`` is ``Normal`` or ``Warning``; ``reason`` is a short CamelCase word; repeated events are
    counted (``count``, ``firstTimestamp``, ``lastTimestamp``) rather than written again.
    """

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Event"
    PLURAL: ClassVar[str] = "events"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ev",)
    HAS_STATUS: ClassVar[bool] = False

    involved_object: FullObjectReference = Field(default_factory=FullObjectReference)
    reason: str | None = None
    message: str | None = None
    type: str | None = None
    source: EventSource = Field(default_factory=EventSource)
    first_timestamp: Time | None = None
    last_timestamp: Time | None = None
    count: int | None = None
    event_time: MicroTime | None = None
    series: EventSeries | None = None
    action: str | None = None
    related: FullObjectReference | None = None
    reporting_component: str | None = None
    reporting_instance: str | None = None

    def semantic_issues(self) -> list[FieldIssue]:
        issues = super().semantic_issues()
        if self.type is not None and self.type not in ("Normal", "Warning"):
            issues.append(FieldIssue(path="type", message=f"must be Normal or Warning, not {self.type!r}"))
        return issues
