"""The resource endpoints: get, list, create, update, patch, delete and the status subresource.

Every handler runs the store's blocking calls in a worker thread. Admission is ``capa apply``'s: the model's
field validation, its semantic issues and, on updates, its immutable fields, each failure a 422 naming the
field in ``details.causes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from capa_py.api.core import Secret
from capa_py.api.loader import _clean_message, format_loc
from capa_py.api.meta import KubeObject
from capa_py.api.templates import InfrastructureTemplate
from capa_py.apiserver import fieldmanager, foreground, limits
from capa_py.apiserver.discovery import group_version
from capa_py.apiserver.fieldvalidation import FieldValidation, decode_json
from capa_py.apiserver.patch import apply_patch
from capa_py.apiserver.status import ApiError, Cause, from_store_error, success
from capa_py.store.errors import AlreadyExists, Conflict, StoreError
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, Propagation

if TYPE_CHECKING:
    from capa_py.apiserver.crd_kinds import ServedVersion

PATCH_RETRIES = 5
# pydantic's error types as the API server's cause reasons: a value of the wrong JSON type is
# FieldValueTypeInvalid, as a CRD's structural schema reports it.
_CAUSE_REASONS = {"missing": "FieldValueRequired", "extra_forbidden": "FieldValueNotSupported"}
_TYPE_ERROR_SUFFIXES = ("_type", "_parsing")
BUILT_IN_GROUPS = ("", "coordination.k8s.io", "rbac.authorization.k8s.io")


@dataclass(frozen=True)
class Target:
    """What a request path names: a kind, maybe a namespace, maybe one object, maybe its status."""

    model: type[KubeObject]
    namespace: str | None
    name: str | None
    subresource: str | None
    served: ServedVersion | None = None
    """For a kind a stored CRD defines: the version the path names (``model`` is its storage model)."""

    @property
    def api_version(self) -> str:
        return self.served.api_version if self.served is not None else self.model.API_VERSION

    def render(self, obj: KubeObject) -> dict[str, Any]:
        """The object as this path serves it."""
        return self.served.render(obj) if self.served is not None else obj.to_dict()

    @property
    def group(self) -> str:
        return group_version(self.model)[0]

    @property
    def custom(self) -> bool:
        """Whether the kind is a custom resource (a CRD's) rather than one built into Kubernetes."""
        return self.group not in BUILT_IN_GROUPS

    @property
    def resource(self) -> str:
        return self.model.PLURAL

    def api_error(self, exc: StoreError, name: str | None = None) -> ApiError:
        return from_store_error(exc, self.resource, self.group, name or self.name or "")

    def invalid(self, name: str, causes: list[Cause]) -> ApiError:
        listed = ", ".join(f"{c.field}: {c.message}" if c.field else c.message for c in causes)
        listed = f"[{listed}]" if len(causes) > 1 else listed  # as the API server joins several
        qualified = f"{self.model.KIND}.{self.group}" if self.group else self.model.KIND
        return ApiError(
            422,
            f'{qualified} "{name}" is invalid: {listed}',
            name=name,
            kind=self.model.KIND,
            group=self.group,
            causes=causes,
        )


def parse_body(raw: bytes) -> Any:
    """The JSON body; 400 BadRequest when it is not JSON or nests too deeply to decode."""
    return decode_json(raw)


_GO_TYPES: dict[type, str] = {bool: "bool", int: "number", float: "number", str: "string", list: "array"}
_DELETE_OPTION_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "gracePeriodSeconds": ((int,), "int64"),
    "propagationPolicy": ((str,), "v1.DeletionPropagation"),
    "orphanDependents": ((bool,), "bool"),
    "dryRun": ((list,), "[]string"),
    "preconditions": ((dict,), "v1.Preconditions"),
    "apiVersion": ((str,), "string"),
    "kind": ((str,), "string"),
}


def delete_options(raw: bytes) -> dict[str, Any]:
    """A DELETE's body as ``DeleteOptions``: 400 BadRequest, as the API server decodes it, when a field has
    the wrong JSON type (before, such a body deleted the object as if it were empty)."""
    options = parse_body(raw)
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ApiError(400, "the request body must be a JSON object (DeleteOptions)")
    for field, (types, go_type) in _DELETE_OPTION_TYPES.items():
        value = options.get(field)
        wrong = value is not None and (
            not isinstance(value, types) or (int in types and isinstance(value, bool))
        )
        if wrong:
            given = "object" if isinstance(value, dict) else _GO_TYPES.get(type(value), type(value).__name__)
            where = f"Go struct field DeleteOptions.{field} of type {go_type}"
            raise ApiError(400, f"json: cannot unmarshal {given} into {where}")
    return options


INT64 = (-(2**63), 2**63 - 1)
_METADATA_INTS = ("generation", "deletionGracePeriodSeconds")


def check_metadata_numbers(kind: str, doc: dict[str, Any]) -> None:
    """400 BadRequest for an ObjectMeta integer that is no int64, as the API server's decoder refuses it
    (before, capa serve stored it)."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return
    for field in _METADATA_INTS:
        value = meta.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            raise ApiError(
                400,
                f"{kind} cannot be handled as a {kind}: json: cannot unmarshal number {value} into Go struct "
                f"field ObjectMeta.metadata.{field} of type int64",
            )


def admit(
    target: Target,
    doc: Any,
    old: KubeObject | None = None,
    validation: FieldValidation | None = None,
    current: KubeObject | None = None,
    dry_run: bool = False,
) -> KubeObject:
    """The document as a validated model, or a 422 listing every field that fails. With ``validation``
    (a write through the API), unknown and duplicate fields are handled as its mode says first.
    ``current`` is the stored object an update replaces (a CRD-defined kind keeps its status, or all but
    its status)."""
    if not isinstance(doc, dict):
        raise ApiError(400, "the request body must be a JSON object")
    check_metadata_numbers(target.model.KIND, doc)
    name = str((doc.get("metadata") or {}).get("name", "")) if isinstance(doc.get("metadata"), dict) else ""
    # Reported with the model's own causes (metadata.name first, as the API server lists them).
    over = limits.causes(target.model.KIND, doc)
    if not over:
        limits.check_stored_size(doc)
    # As the API server decodes a body: a missing apiVersion or kind is the path's.
    doc = {**doc, "apiVersion": doc.get("apiVersion") or target.api_version}
    doc["kind"] = doc.get("kind") or target.model.KIND
    api_version, kind = doc["apiVersion"], doc["kind"]
    if (api_version, kind) != (target.api_version, target.model.KIND):
        raise ApiError(
            400,
            f"the object is {api_version}/{kind}, the path is for {target.api_version}/{target.model.KIND}",
        )
    if target.served is not None:
        doc, pruned, failing = target.served.admit(doc, current, target.subresource == "status")
        if validation is not None:  # a strict decoding error comes before the schema's verdict
            validation.report(target.model, doc, pruned)
        if failing or over:
            raise target.invalid(name, over + [Cause(i.field, i.message, i.reason) for i in failing])
    elif validation is not None:
        doc = validation.check(target.model, doc)
    try:
        obj = target.model.model_validate(doc)
    except ValidationError as exc:
        causes = []
        for error in exc.errors():
            reason = _CAUSE_REASONS.get(error["type"], "FieldValueInvalid")
            if error["type"].endswith(_TYPE_ERROR_SUFFIXES):
                reason = "FieldValueTypeInvalid"
            causes.append(Cause(format_loc(error["loc"]), _clean_message(error["msg"]), reason))
        raise target.invalid(name, over + causes) from exc
    if over:
        raise target.invalid(name, over)
    issues = obj.semantic_issues()
    if old is not None and not (isinstance(obj, InfrastructureTemplate) and obj.skips_immutability(dry_run)):
        issues += obj.immutable_issues(old)
    if issues:
        raise target.invalid(name, [Cause(i.path, i.message) for i in issues])
    return obj


def _check_namespace(target: Target, obj: KubeObject) -> None:
    if not target.model.NAMESPACED:
        obj.metadata.namespace = None
        return
    if obj.metadata.namespace and obj.metadata.namespace != target.namespace:
        raise ApiError(
            400, "the namespace of the provided object does not match the namespace sent on the request"
        )
    obj.metadata.namespace = target.namespace


def create(
    store: ObjectStore,
    target: Target,
    body: Any,
    dry_run: bool,
    validation: FieldValidation | None = None,
    manager: str = "",
) -> dict[str, Any]:
    body, given = fieldmanager.take_managed_fields(body)
    obj = admit(target, body, validation=validation)
    _check_namespace(target, obj)
    if not obj.metadata.name and not obj.metadata.generate_name:
        raise target.invalid(
            "", [Cause("metadata.name", "name or generateName is required", "FieldValueRequired")]
        )
    fieldmanager.record_update(target.model, target.subresource, obj, given, manager, sent=body)
    try:
        if dry_run:
            if obj.metadata.name and get_or_none(store, target.model, obj.metadata.name, target.namespace):
                raise AlreadyExists(f"{obj.metadata.name} already exists")
            return _dry(target, obj)
        return target.render(store.create(obj))
    except StoreError as exc:
        raise target.api_error(exc, obj.metadata.name) from exc


def _dry(target: Target, obj: KubeObject) -> dict[str, Any]:
    if isinstance(obj, Secret):
        obj = obj.model_copy(deep=True)
        obj.normalise()
    return target.render(obj)


def get(store: ObjectStore, target: Target) -> KubeObject:
    assert target.name is not None
    try:
        return store.get(target.model, target.name, target.namespace)
    except StoreError as exc:
        raise target.api_error(exc) from exc


def _write(store: ObjectStore, target: Target, obj: KubeObject, dry_run: bool) -> dict[str, Any]:
    try:
        if dry_run:
            current = store.get(target.model, obj.metadata.name, target.namespace)
            wanted = obj.metadata.resource_version
            if wanted and wanted != current.metadata.resource_version:
                raise Conflict(
                    "the object has been modified; please apply your changes to the latest version"
                )
            return _dry(target, obj)
        if target.subresource == "status":
            return target.render(store.update_status(obj))
        return target.render(store.update(obj))
    except StoreError as exc:
        raise target.api_error(exc, obj.metadata.name) from exc


def replace(
    store: ObjectStore,
    target: Target,
    body: Any,
    dry_run: bool,
    validation: FieldValidation | None = None,
    manager: str = "",
) -> dict[str, Any]:
    body, given = fieldmanager.take_managed_fields(body)
    meta = body.get("metadata") if isinstance(body, dict) else None
    if isinstance(meta, dict) and meta.get("name") not in (None, target.name):
        # Checked before the object is read, as the API server does: a mismatch is a bad request even
        # when no object has the URL's name.
        raise ApiError(400, "the name of the object does not match the name on the URL")
    current = get(store, target)
    old = None if target.subresource == "status" else current
    obj = admit(target, body, old, validation, current, dry_run)
    _check_namespace(target, obj)
    obj.metadata.name = target.name or ""
    if target.custom and not obj.metadata.resource_version:
        # Custom resources allow no unconditional update (core kinds such as Secret and Lease do).
        cause = Cause("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")
        error = target.invalid(obj.metadata.name, [cause])
        error.kind = target.resource  # the API server names the resource here, not the kind
        raise error
    fieldmanager.record_update(target.model, target.subresource, obj, given, manager, old=current)
    return _write(store, target, obj, dry_run)


def patch(
    store: ObjectStore,
    target: Target,
    content_type: str,
    body: Any,
    dry_run: bool,
    validation: FieldValidation | None = None,
    manager: str = "",
) -> dict[str, Any]:
    for attempt in range(PATCH_RETRIES):
        current = get(store, target)
        doc = target.render(current)
        patched, given = fieldmanager.take_managed_fields(apply_patch(content_type, doc, body))
        pinned = (patched.get("metadata") or {}).get("resourceVersion")
        if not pinned or pinned == current.metadata.resource_version:
            # Unconditional unless the patch itself names a resourceVersion (as the API server does).
            patched.setdefault("metadata", {})["resourceVersion"] = current.metadata.resource_version
        explicit = pinned and pinned != current.metadata.resource_version
        old = None if target.subresource == "status" else current
        obj = admit(target, patched, old, validation, current, dry_run)
        _check_namespace(target, obj)
        if obj.metadata.name != target.name:
            raise ApiError(400, "a patch may not change the object's name")
        fieldmanager.record_update(target.model, target.subresource, obj, given, manager, old=current)
        try:
            return _write(store, target, obj, dry_run)
        except ApiError as exc:
            if exc.reason != "Conflict" or explicit or attempt == PATCH_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def delete(
    store: ObjectStore, target: Target, propagation: str | None, precondition_rv: str | None, dry_run: bool
) -> dict[str, Any]:
    assert target.name is not None
    chosen = propagation or "Background"
    if chosen not in ("Background", "Orphan", "Foreground"):
        raise ApiError(400, f"unknown propagationPolicy {chosen!r}: Background, Orphan or Foreground")
    policy: Propagation = "Orphan" if chosen == "Orphan" else "Background"
    try:
        if dry_run:
            current = store.get(target.model, target.name, target.namespace)
            if precondition_rv and precondition_rv != current.metadata.resource_version:
                raise Conflict("resourceVersion precondition failed")
            return target.render(current)
        if chosen == "Foreground":
            current = store.get(target.model, target.name, target.namespace)
            last = foreground.mark(store, current, precondition_rv)
        else:
            last = store.delete(target.model, target.name, target.namespace, policy, precondition_rv)
    except StoreError as exc:
        raise target.api_error(exc) from exc
    if last is None:
        return success(target.name, target.resource, target.group)
    if last.metadata.finalizers:
        # An object left waiting for its finalizers is answered with its state; one that is gone with a
        # Success Status (custom resources included).
        return target.render(last)
    return success(target.name, target.resource, target.group, last.metadata.uid)
