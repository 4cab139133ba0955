"""``metadata.managedFields`` and server-side apply (``PATCH`` with ``application/apply-patch+yaml``).

Every write through ``capa serve`` records who set which fields, as the Kubernetes API server does:

* an apply (``fieldManager`` required, ``force=true`` to take fields from others) is an ``Apply`` entry
  owning exactly the fields of its configuration; it creates the object when there is none (201);
* a create, update or non-apply patch is an ``Update`` entry of the request's ``fieldManager`` (else the
  User-Agent up to its first ``/``: ``kubectl``, ``OpenAPI-Generator`` for the Python client) owning what it
  changed, per API version; writes to the status subresource are entries of their own
  (``subresource: status``); at most :data:`MAX_UPDATE_MANAGERS` update entries are kept, the oldest
  merged into ``ancient-changes``;
* a write may set ``managedFields`` itself: a non-empty valid list replaces them, an empty one (``[]`` or
  ``[{}]``) clears them, and an object without any is not tracked again until an apply (which first gives
  every existing field to ``before-first-apply``);
* ``kubectl apply --server-side`` (manager ``kubectl``) on an object last applied client-side may change the
  fields whose live value is still the one in the ``kubectl.kubernetes.io/last-applied-configuration``
  annotation without conflict, and keeps that annotation up to date.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from capa_py.api.meta import KubeObject, ManagedFieldsEntry, utcnow
from capa_py.apiserver import apply as merging
from capa_py.apiserver import fieldsets
from capa_py.apiserver.apply import Conflicts, Ignored, ManagerKey
from capa_py.apiserver.fieldsets import EMPTY, FieldSet
from capa_py.apiserver.status import ApiError, Cause

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


def _ignored(model: type[KubeObject], subresource: str | None, *docs: Any) -> Ignored:
    status = fieldsets.field("status")
    if subresource == "status":
        top = {name for doc in docs if isinstance(doc, dict) for name in doc} - {"status"}
        return Ignored(_STRIPPED, frozenset((fieldsets.field(name),) for name in top))
    if model.HAS_STATUS:
        return Ignored(_STRIPPED, frozenset([(status,)]))
    return Ignored(_STRIPPED)


def _without_managed(doc: dict[str, Any]) -> dict[str, Any]:
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
    return _without_managed(doc), ABSENT if given is None else given


def set_managed(obj: KubeObject, managed: Managed | None) -> None:
    entries = managed.encode() if managed is not None else []
    obj.metadata.managed_fields = [ManagedFieldsEntry.model_validate(e) for e in entries] or None


def _live(obj: KubeObject | None) -> Managed:
    if obj is None:
        return Managed()
    try:
        return Managed.decode(obj.to_dict().get("metadata", {}).get("managedFields"))
    except ValueError:
        return Managed()


def record_update(
    model: type[KubeObject],
    subresource: str | None,
    obj: KubeObject,
    given: Any,
    manager: str,
    old: KubeObject | None = None,
    sent: Any = None,
) -> None:
    """Set ``obj``'s managedFields for a create (``old`` None; the fields are those ``sent``) or an update
    of ``old`` by ``manager``; ``given`` is what the request said of managedFields."""
    if given is ABSENT or subresource is not None:
        # A subresource's writes never set managedFields.
        managed = _live(old)
    else:
        try:
            managed = Managed.decode(given)
        except ValueError:
            managed = _live(old)
        else:
            if not managed.fields and old is not None:
                set_managed(obj, None)  # cleared: not tracked again until an apply
                return
    if old is not None and not managed.fields:
        set_managed(obj, None)
        return
    before = _without_managed(old.to_dict()) if old is not None else {}
    after = _without_managed(obj.to_dict() if old is not None or not isinstance(sent, dict) else sent)
    version = model.API_VERSION
    me = manager_key(manager, UPDATE, version, subresource or "")
    structure = merging.structure_of(model)
    ignored = _ignored(model, subresource, before, after)
    fields, changed = merging.update(before, after, managed.fields, me, structure, ignored)
    managed.replace(fields, me, version, changed)
    managed.cap()
    set_managed(obj, managed)


# -- apply ----------------------------------------------------------------------------------------------


def patch_options_invalid(field: str, message: str, reason: str) -> ApiError:
    return ApiError(
        422,
        f'PatchOptions.meta.k8s.io "" is invalid: {field}: {message}',
        kind="PatchOptions",
        group="meta.k8s.io",
        causes=[Cause(field, message, reason)],
    )


def check_force(query: Mapping[str, str], content_type: str) -> None:
    """``force`` is for applies only (a 422 on any other patch, as the API server answers)."""
    if "force" in query and content_type != "application/apply-patch+yaml":
        raise patch_options_invalid(
            "force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden"
        )


class _Loader(yaml.SafeLoader):
    """YAML as the API server reads it: a date or a time stays a string."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_config(raw: bytes) -> dict[str, Any]:
    """An apply body: JSON or YAML, one object."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        try:
            doc = yaml.load(raw.decode(), Loader=_Loader)  # a SafeLoader
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"error decoding YAML: {exc}") from exc
    if not isinstance(doc, dict):
        shown = "array" if isinstance(doc, list) else type(doc).__name__
        raise ApiError(
            400, f"error decoding YAML: cannot unmarshal {shown} into an object: an apply sends one object"
        )
    return doc


def _manager_text(key: ManagerKey, version: str) -> str:
    manager, operation, _, subresource = key
    text = json.dumps(manager)
    if subresource:
        text += f" with subresource {json.dumps(subresource)}"
    if operation == UPDATE:
        text += f" using {version}"
    return text


def conflict_error(conflicts: Conflicts, managed: Managed) -> ApiError:
    """The 409 of an apply that would change others' fields: one cause per field."""

    def identity(key: ManagerKey) -> str:
        manager, operation, version, subresource = key
        entry = {"manager": manager, "operation": operation}
        if operation == UPDATE:
            entry["apiVersion"] = managed.versions.get(key, version)
        if subresource:
            entry["subresource"] = subresource
        return json.dumps(entry, separators=(",", ":"))

    listed: list[tuple[str, str]] = []
    groups: list[tuple[str, list[str]]] = []
    for key in sorted(conflicts.by_manager, key=identity):
        who = _manager_text(key, managed.versions.get(key, key[2]))
        paths = [fieldsets.path_string(p) for p in fieldsets.iterate(conflicts.by_manager[key])]
        groups.append((who, paths))
        listed += [(who, p) for p in paths]
    if len(listed) == 1:
        message = f"Apply failed with 1 conflict: conflict with {listed[0][0]}: {listed[0][1]}"
    else:
        lines = []
        for who, paths in groups:
            lines.append(f"conflicts with {who}:")
            lines += [f"- {p}" for p in paths]
        message = f"Apply failed with {len(listed)} conflicts: " + "\n".join(lines)
    causes = [Cause(path, f"conflict with {who}", "FieldManagerConflict") for who, path in listed]
    return ApiError(409, message, causes=causes)


def _allowed_by_last_applied(live: dict[str, Any], structure: merging.Structure) -> FieldSet:
    """Fields whose live value is still the one kubectl last applied client-side."""
    text = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return EMPTY
    try:
        last_applied = json.loads(text)
    except json.JSONDecodeError:
        return EMPTY
    if not isinstance(last_applied, dict):
        return EMPTY
    comparison = merging.compare(last_applied, live, structure)
    differing = comparison.added | comparison.removed | comparison.modified
    return frozenset(merging.field_set(last_applied, structure)) - differing


def _last_applied_text(config: dict[str, Any]) -> str:
    """The annotation's value as the API server writes it: the applied object without the annotation, as
    JSON with sorted keys, ending in a newline."""
    doc = json.loads(json.dumps(config))
    annotations = doc.get("metadata", {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
        if not annotations:
            doc["metadata"].pop("annotations")
    return fieldsets.canonical_json(doc) + "\n"


def strip_reset(model: type[KubeObject], subresource: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration without what the endpoint does not write (``status`` on the main resource of a
    kind with a status subresource; everything but ``status`` and the object's identity on that
    subresource)."""
    if subresource == "status":
        meta = {k: v for k, v in config["metadata"].items() if k in ("name", "namespace", "resourceVersion")}
        kept = {k: v for k, v in config.items() if k in ("apiVersion", "kind", "status")}
        return {**kept, "metadata": meta}
    if model.HAS_STATUS:
        return {k: v for k, v in config.items() if k != "status"}
    return config


def apply_config(
    model: type[KubeObject],
    subresource: str | None,
    current: KubeObject | None,
    config: dict[str, Any],
    manager: str,
    force: bool,
) -> tuple[dict[str, Any], Managed]:
    """The object after ``manager`` applies ``config`` to ``current`` (None: it does not exist yet) and
    its managers; the 409 :class:`ApiError` listing the conflicts unless ``force``."""
    structure = merging.structure_of(model)
    live = _without_managed(current.to_dict()) if current is not None else {}
    managed = _live(current)
    ignored = _ignored(model, subresource, live, config)
    version = model.API_VERSION
    if current is not None and not managed.fields:
        # An object no manager tracks yet: its fields so far belong to before-first-apply.
        first = manager_key(BEFORE_FIRST_APPLY, UPDATE, version, "")
        fields, _ = merging.update({}, live, {}, first, structure, _ignored(model, None))
        managed.replace(fields, first, version, changed=False)
    me = manager_key(manager, APPLY, "", subresource or "")
    merged, fields = _merge(live, config, managed, me, structure, ignored, force, manager)
    changed = merging.compare(live, merged, structure).without(ignored)
    object_changed = current is None or bool(changed.added or changed.removed or changed.modified)
    managed.replace(fields, me, version, object_changed)
    managed.cap()
    if manager == KUBECTL and LAST_APPLIED in (merged.get("metadata", {}).get("annotations") or {}):
        merged["metadata"]["annotations"][LAST_APPLIED] = _last_applied_text(config)
    return merged, managed


def _merge(
    live: dict[str, Any],
    config: dict[str, Any],
    managed: Managed,
    me: ManagerKey,
    structure: merging.Structure,
    ignored: Ignored,
    force: bool,
    manager: str,
) -> tuple[dict[str, Any], dict[ManagerKey, FieldSet]]:
    try:
        return merging.apply(live, config, managed.fields, me, structure, ignored, force)
    except Conflicts as conflicts:
        if manager != KUBECTL:
            raise conflict_error(conflicts, managed) from None
        # kubectl moving from client-side apply: fields still as last applied may change.
        allowed = _allowed_by_last_applied(live, structure)
        remaining = {k: v - allowed for k, v in conflicts.by_manager.items() if v - allowed}
        if remaining:
            raise conflict_error(Conflicts(remaining), managed) from None
        return merging.apply(live, config, managed.fields, me, structure, ignored, True)
