"""Kubernetes object metadata and the base model every kind derives from.

Field names follow the Kubernetes API (camelCase on the wire, snake_case in Python) so that objects
serialised here are byte-for-byte what ``kubectl get -o json`` would print, and manifests written for a
real cluster load unchanged.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, field_validator
from pydantic.alias_generators import to_camel


def utcnow() -> datetime:
    """Now, in UTC, truncated to whole seconds as Kubernetes timestamps are."""
    return datetime.now(UTC).replace(microsecond=0)


def _format_time(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, PlainSerializer(_format_time, return_type=str, when_used="json")]
"""A ``metav1.Time``: RFC 3339 in UTC with second precision on the wire."""


class KubeModel(BaseModel):
    """Base for every API struct: camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=False,
        defer_build=True,
    )


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(
            "must be a lowercase RFC 1123 subdomain: lowercase alphanumerics, '-' or '.', "
            "starting and ending with an alphanumeric"
        )
    return value


def validate_dns_label(value: str) -> str:
    """``value`` unchanged when it is an RFC 1123 label, as a Namespace's name must be (else ValueError)."""
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            "must be a lowercase RFC 1123 label: at most 63 lowercase alphanumerics or '-', starting and "
            "ending with an alphanumeric"
        )
    return value


def validate_path_segment_name(value: str) -> str:
    """A name required only to be one path segment, as RBAC objects' are (``system:basic-user``)."""
    if value in (".", ".."):
        raise ValueError(f"may not be '{value}'")
    for forbidden in ("/", "%"):
        if forbidden in value:
            raise ValueError(f"may not contain '{forbidden}'")
    return value


def validate_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix:
        validate_dns_subdomain(prefix)
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(f"invalid label key {key!r}")
    return key


def validate_label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"invalid label value {value!r}")
    return value


def validate_labels(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` unchanged when every key and value is a valid label key and value (else ValueError)."""
    for key, label_value in labels.items():
        validate_label_key(key)
        validate_label_value(label_value)
    return labels


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ManagedFieldsEntry(KubeModel):
    """One manager's fields (``metadata.managedFields``): who (``manager``), by which operation (``Apply``
    or ``Update``), at which API version and subresource, and the fields in ``FieldsV1`` form
    (:mod:`capa_py.apiserver.fieldsets`). ``capa serve`` keeps them; controllers writing through the store
    carry them along unchanged."""

    manager: str | None = None
    operation: str | None = None
    api_version: str | None = None
    time: Time | None = None
    fields_type: str | None = None
    fields_v1: dict[str, Any] | None = None
    subresource: str | None = None


class ObjectMeta(KubeModel):
    name: str = ""
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    finalizers: list[str] = Field(default_factory=list)
    managed_fields: list[ManagedFieldsEntry] | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return validate_dns_subdomain(value) if value else value

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str | None) -> str | None:
        return validate_dns_label(value) if value else value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_labels(value)


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """A status condition in the shape Cluster API and ``metav1.Condition`` share."""

    type: str
    status: ConditionStatus
    severity: Literal["Error", "Warning", "Info", ""] | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: Time | None = None
    observed_generation: int | None = None


class ObjectReference(KubeModel):
    """A ``corev1.ObjectReference`` as Cluster API uses it for infrastructure references."""

    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None


class FieldIssue(BaseModel):
    """A semantic validation problem at a field path (``spec.network.vpc.cidrBlock``)."""

    path: str
    message: str


_PRESENCE_KEYS: set[str] = set()


def keep_when_empty(key: str) -> str:
    """Mark the field whose wire name is ``key`` as one whose empty object means something (a Go pointer to
    a struct: ``spotMarketOptions: {}`` asks for Spot Instances): :meth:`KubeObject.to_dict` keeps it."""
    _PRESENCE_KEYS.add(key)
    return key


def _prune_empty(value: Any) -> Any:
    """Drop empty maps and lists, as Go's ``omitempty`` does on the wire (but not the empty object of a field
    marked with :func:`keep_when_empty`)."""
    if isinstance(value, dict):
        pruned = {k: _prune_empty(v) for k, v in value.items()}
        return {
            k: v for k, v in pruned.items() if v not in ({}, [], None) or (v == {} and k in _PRESENCE_KEYS)
        }
    if isinstance(value, list):
        return [_prune_empty(v) for v in value]
    return value


class KubeObject(KubeModel):
    """Base of every kind. Subclasses set the class variables and add ``spec``/``status``."""

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    PLURAL: ClassVar[str] = ""
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    NAMESPACED: ClassVar[bool] = True
    # Kinds without a status subresource (Secret) keep everything in the main resource.
    HAS_STATUS: ClassVar[bool] = True

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def model_post_init(self, context: Any, /) -> None:
        if not self.api_version:
            self.api_version = self.API_VERSION
        if not self.kind:
            self.kind = self.KIND
        if self.api_version != self.API_VERSION or self.kind != self.KIND:
            raise ValueError(
                f"{type(self).__name__} holds {self.API_VERSION}/{self.KIND}, "
                f"not {self.api_version}/{self.kind}"
            )

    @classmethod
    def check_name(cls, name: str) -> str:
        """``name`` when it is a valid name for this kind (most kinds: a DNS subdomain), else ValueError."""
        return validate_dns_subdomain(name)

    # -- what the API server sets itself ----------------------------------------------------------
    def prepare_for_create(self) -> None:
        """Set what the API server sets on every new object of this kind (after a status subresource's
        status is reset). Nothing for most kinds."""

    def prepare_for_update(self) -> None:
        """Set what the API server keeps set on every update of this kind. Nothing for most kinds."""

    # -- identity -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def uid(self) -> str:
        if not self.metadata.uid:
            raise ValueError(f"{self.ref()} has no uid: it was not read from a store")
        return self.metadata.uid

    def ref(self) -> str:
        """``Kind namespace/name`` for messages and logs."""
        if self.namespace:
            return f"{self.KIND} {self.namespace}/{self.name}"
        return f"{self.KIND} {self.name}"

    def owner_reference(self, controller: bool = True) -> OwnerReference:
        """An owner reference pointing at this object, for its dependents."""
        return OwnerReference(
            api_version=self.api_version,
            kind=self.kind,
            name=self.name,
            uid=self.uid,
            controller=controller or None,
            block_owner_deletion=True if controller else None,
        )

    @property
    def being_deleted(self) -> bool:
        return self.metadata.deletion_timestamp is not None

    def failure(self) -> tuple[str, str | None] | None:
        """The object's own failure as ``(reason, message)``, when its status records one (Cluster API's
        ``failureReason``/``failureMessage`` by default; kinds that say it otherwise override this)."""
        status = getattr(self, "status", None)
        reason = getattr(status, "failure_reason", None)
        return (str(reason), getattr(status, "failure_message", None)) if reason else None

    def settled(self) -> bool | None:
        """Whether a wait for this object (``capa apply --wait``) is over, for kinds whose readiness is not
        Cluster API's status conventions (phase, ``ready``); None lets the conventions decide."""
        return None

    # -- wire format --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The object as the Kubernetes API serves it (camelCase, empty fields omitted)."""
        raw = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        # managedFields are kept as they are: ``{}`` in fieldsV1 marks an owned field.
        managed = raw.get("metadata", {}).pop("managedFields", None)
        ordered: dict[str, Any] = {"apiVersion": raw.pop("apiVersion"), "kind": raw.pop("kind")}
        ordered.update(raw)
        pruned: dict[str, Any] = _prune_empty(ordered)
        if managed:
            pruned.setdefault("metadata", {})["managedFields"] = managed
        return pruned

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls.model_validate(data)

    def desired_state(self) -> dict[str, Any]:
        """Everything a generation counts: the document without metadata and status."""
        data = self.to_dict()
        for key in ("apiVersion", "kind", "metadata", "status"):
            data.pop(key, None)
        return data

    def semantic_issues(self) -> list[FieldIssue]:
        """Cross-field validation beyond what field types express. Kinds override."""
        return []

    def immutable_issues(self, old: Self) -> list[FieldIssue]:
        """Fields this update (``self``, replacing the stored ``old``) may not change. Kinds override."""
        return []
