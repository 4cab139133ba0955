"""What every store checks before it writes an object: the kind is registered and the object is valid.

Both stores run the same check, so an invalid object is refused with the same ``Invalid`` (naming the field)
whether it is written to the SQLite file or sent to an API server whose admission may be laxer.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from capa_py.api.core import Secret
from capa_py.api.custom_resource import CustomResource
from capa_py.api.loader import format_loc
from capa_py.api.meta import KubeObject
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
