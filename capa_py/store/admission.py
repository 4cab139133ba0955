"""What every store checks before it writes an object: the kind is registered and the object is valid.

Both stores run the same check, so an invalid object is refused with the same ``Invalid`` (naming the field)
whether it is written to the SQLite file or sent to an API server whose admission may be laxer.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from capa_py.api.core import Secret
from capa_py.api.custom_resource import CustomResource
from capa_py.api.loader import format_loc
from capa_py.api.meta import KubeObject, _prune_empty
from capa_py.api.registry import KindRegistry
from capa_py.store.errors import Invalid


def check_registered(registry: KindRegistry, kind: type[KubeObject]) -> None:
    """The kind is the registry's, or one a stored CustomResourceDefinition defines (the API server
    serves those only while their CRD is stored)."""
    if kind not in registry and not issubclass(kind, CustomResource):
        raise Invalid(f"kind {kind.API_VERSION}/{kind.KIND} is not registered with this store", "kind")


def validated_document(registry: KindRegistry, obj: KubeObject) -> dict[str, Any]:
    """The object's wire form after full validation; raises Invalid naming the field."""
    check_registered(registry, type(obj))
    if isinstance(obj, Secret):
        obj = obj.model_copy(deep=True)
        obj.normalise()
    doc = obj.to_dict()
    try:
        checked = type(obj).model_validate(doc)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Invalid(error["msg"].removeprefix("Value error, "), format_loc(error["loc"])) from exc
    for issue in checked.semantic_issues():
        raise Invalid(issue.message, issue.path)
    return doc


@cache
def _status_model(kind: type[KubeObject]) -> type[BaseModel] | None:
    field = kind.model_fields.get("status")
    annotation = None if field is None else field.annotation
    if (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and field is not None
        and field.alias in (None, "status")
    ):
        return annotation
    return None


def validated_status(registry: KindRegistry, obj: KubeObject) -> tuple[dict[str, Any] | None, bool]:
    """The wire form of the object's status alone (None when it has none), validated as its status model
    and the kind's cross-field checks; raises Invalid naming the field. The second value says whether the
    check was of the status alone (False: the kind's status is not a model of its own, and the whole
    object was validated as :func:`validated_document` does).

    A status write stores the status only, so only the status is checked: serializing and re-validating
    the whole object (most of a status write's cost) would check a spec the write does not store."""
    model = _status_model(type(obj))
    if model is None:
        return validated_document(registry, obj).get("status"), False
    check_registered(registry, type(obj))
    status = getattr(obj, "status", None)
    if status is None:
        return None, True
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc: dict[str, Any] | None = _prune_empty({"status": dumped}).get("status")
    try:
        model.model_validate(doc or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Invalid(
            error["msg"].removeprefix("Value error, "), format_loc(("status", *error["loc"]))
        ) from exc
    for issue in obj.semantic_issues():
        raise Invalid(issue.message, issue.path)
    return doc, True
