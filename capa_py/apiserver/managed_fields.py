"""``metadata.managedFields`` as the API server keeps them: :class:`Managed` decodes and encodes the entries
(one per manager, operation, API version of an update, and subresource, with its ``FieldsV1`` and time),
keeps at most :data:`MAX_UPDATE_MANAGERS` update entries (the oldest merged into ``ancient-changes``), and
names the fields nobody owns."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from capa_py.api.meta import KubeObject, ManagedFieldsEntry, utcnow
from capa_py.apiserver import fieldsets
from capa_py.apiserver.apply import Ignored, ManagerKey
from capa_py.apiserver.fieldsets import EMPTY, FieldSet

APPLY = "Apply"
UPDATE = "Update"
MAX_UPDATE_MANAGERS = 10
ANCIENT = "ancient-changes"
BEFORE_FIRST_APPLY = "before-first-apply"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL = "kubectl"
MAX_MANAGER_LENGTH = 128

_STRIPPED: FieldSet = frozenset(
    [(fieldsets.field("apiVersion"),), (fieldsets.field("kind"),), (fieldsets.field("metadata"),)]
    + [
        (fieldsets.field("metadata"), fieldsets.field(name))
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    ]
)
"""Fields nobody owns: identity and what the server sets."""

ABSENT: Any = object()
"""A request that says nothing about ``managedFields``."""


class Managed:
    """The managers of one object: each one's fields, API version and the time it last changed the
    object (an entry that never changed it has none)."""

    def __init__(self) -> None:
        self.fields: dict[ManagerKey, FieldSet] = {}
        self.times: dict[ManagerKey, str] = {}
        self.versions: dict[ManagerKey, str] = {}

    @classmethod
    def decode(cls, entries: Any) -> Managed:
        """From the wire form; ValueError for anything the API server would not decode."""
        managed = cls()
        if entries is None:
            return managed
        if not isinstance(entries, list):
            raise ValueError("managedFields must be a list")
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise ValueError("a managedFields entry must be an object")
            if not entry:
                continue
            operation = entry.get("operation")
            if operation not in (APPLY, UPDATE):
                raise ValueError(f"operation must be Apply or Update, not {operation!r}")
            if entry.get("fieldsType") != "FieldsV1":
                raise ValueError(f"unknown fieldsType {entry.get('fieldsType')!r}")
            version = str(entry.get("apiVersion") or "")
            key = manager_key(
                str(entry.get("manager") or ""), operation, version, str(entry.get("subresource") or "")
            )
            if key in managed.fields:
                raise ValueError(f"duplicate managedFields entry for {key}")
            managed.fields[key] = fieldsets.decode(entry.get("fieldsV1") or {})
            managed.versions[key] = version
            if entry.get("time"):
                managed.times[key] = _parse_time(entry["time"])
        return managed

    def encode(self) -> list[dict[str, Any]]:
        """The wire form, ordered as the API server orders it: applies before updates, then by time (none
        first), manager, API version and subresource."""

        def order(key: ManagerKey) -> tuple[str, str, str, str, str]:
            manager, operation, _, subresource = key
            return (operation, self.times.get(key, ""), manager, self.versions.get(key, ""), subresource)

        out = []
        for key in sorted(self.fields, key=order):
            manager, operation, _, subresource = key
            entry: dict[str, Any] = {
                "manager": manager,
                "operation": operation,
                "apiVersion": self.versions.get(key, ""),
            }
            if key in self.times:
                entry["time"] = self.times[key]
            entry["fieldsType"] = "FieldsV1"
            entry["fieldsV1"] = fieldsets.encode(self.fields[key])
            if subresource:
                entry["subresource"] = subresource
            out.append(entry)
        return out

    def replace(
        self, fields: dict[ManagerKey, FieldSet], me: ManagerKey, version: str, changed: bool
    ) -> None:
        """Take the managers' fields after a write by ``me`` at API ``version``; ``changed``: the write
        changed the object (``me``'s time is now)."""
        for key in set(self.fields) - set(fields):
            self.fields.pop(key)
            self.times.pop(key, None)
            self.versions.pop(key, None)
        self.fields = dict(fields)
        for key in fields:
            self.versions.setdefault(key, key[2] if key[1] == UPDATE else version)
        if me in fields:
            self.versions[me] = version
            if changed:
                self.times[me] = _now()

    def cap(self) -> None:
        """At most :data:`MAX_UPDATE_MANAGERS` update entries: the oldest merge into ``ancient-changes``
        (one per API version), whose time is the latest of those merged."""

        def count() -> int:
            return sum(1 for k in self.fields if k[1] == UPDATE)

        oldest_first = sorted(
            (k for k in self.fields if k[1] == UPDATE), key=lambda k: (self.times.get(k, ""), k[0])
        )
        for key in oldest_first:
            if count() <= MAX_UPDATE_MANAGERS:
                return
            version = self.versions.get(key, key[2])
            bucket = manager_key(ANCIENT, UPDATE, version, "")
            if key == bucket:
                continue
            self.fields[bucket] = self.fields.get(bucket, EMPTY) | self.fields.pop(key)
            self.versions[bucket] = version
            self.versions.pop(key, None)
            time = self.times.pop(key, "")
            if time and time > self.times.get(bucket, ""):
                self.times[bucket] = time


def _parse_time(value: Any) -> str:
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise ValueError(f"time {value!r} is not an RFC 3339 time") from exc
    return _format(when.replace(tzinfo=when.tzinfo or UTC))


def _format(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _format(utcnow())


def manager_key(manager: str, operation: str, api_version: str, subresource: str) -> ManagerKey:
    """Entries are told apart by manager, operation and subresource, and updates also by API version."""
    return (manager, operation, api_version if operation == UPDATE else "", subresource)


def manager_name(query: Mapping[str, str], user_agent: str) -> str:
    """The request's ``fieldManager``, else its User-Agent up to the first ``/``."""
    return query.get("fieldManager") or user_agent.split("/", 1)[0][:MAX_MANAGER_LENGTH]


def ignored_fields(model: type[KubeObject], subresource: str | None, *docs: Any) -> Ignored:
    status = fieldsets.field("status")
    if subresource == "status":
        top = {name for doc in docs if isinstance(doc, dict) for name in doc} - {"status"}
        return Ignored(_STRIPPED, frozenset((fieldsets.field(name),) for name in top))
    if model.HAS_STATUS:
        return Ignored(_STRIPPED, frozenset([(status,)]))
    return Ignored(_STRIPPED)


def without_managed(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return doc
    return {**doc, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _timeless(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    entries = [{k: v for k, v in e.items() if k != "time"} for e in meta.get("managedFields") or []]
    return {**doc, "metadata": {**meta, "managedFields": entries}}


def unchanged(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether a write would store nothing new: the same object, managedFields the same but for their
    times (the API server then keeps the old object, resourceVersion and times included)."""
    return new == old or _timeless(new) == _timeless(old)


def take_managed_fields(doc: Any) -> tuple[Any, Any]:
    """A request's object without ``managedFields`` and what it said of them (:data:`ABSENT` if
    nothing)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return doc, ABSENT
    given = doc["metadata"].get("managedFields", ABSENT)
    return without_managed(doc), ABSENT if given is None else given


def set_managed(obj: KubeObject, managed: Managed | None) -> None:
    entries = managed.encode() if managed is not None else []
    obj.metadata.managed_fields = [ManagedFieldsEntry.model_validate(e) for e in entries] or None


def live_managed(obj: KubeObject | None) -> Managed:
    if obj is None:
        return Managed()
    try:
        return Managed.decode(obj.to_dict().get("metadata", {}).get("managedFields"))
    except ValueError:
        return Managed()
