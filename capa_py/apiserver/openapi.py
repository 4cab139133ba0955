"""OpenAPI v3 documents, as ``kubectl apply`` (client-side validation) and ``kubectl explain`` read them.

``/openapi/v3`` lists one document per group-version; each holds the JSON schemas of its kinds, derived from
the pydantic models (camelCase names, descriptions, enums), with the ``x-kubernetes-group-version-kind``
extension kubectl finds a kind's schema by. Optional fields become ``nullable`` (OpenAPI 3.0 has no null
type). Each path declares its parameters, each operation its query parameters and request body (what a
client generated from the document needs; tests/fuzz runs schemathesis over one kind's operations).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from capa_py.api.meta import KubeObject
from capa_py.api.registry import KindRegistry
from capa_py.apiserver.discovery import by_group
from capa_py.apiserver.openapi_crd import OBJECT_META, crd_schema, served_by_crd
from capa_py.manifests.crds import is_builtin_group


def _path_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _prefix(group: str, version: str) -> str:
    reversed_group = ".".join(reversed(group.split("."))) if group else "io.k8s.api.core"
    return f"{reversed_group}.{version}"


def _clean(node: Any, prefix: str) -> Any:
    """Pydantic's JSON schema as OpenAPI 3.0: null unions as ``nullable``, refs into components."""
    if isinstance(node, list):
        return [_clean(n, prefix) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace("#/$defs/", f"#/components/schemas/{prefix}.")
        elif key == "anyOf" and isinstance(value, list):
            options = [v for v in value if v != {"type": "null"}]
            if len(options) < len(value):
                out["nullable"] = True
            if len(options) == 1:
                single = _clean(options[0], prefix)
                if "$ref" in single:
                    out["allOf"] = [single]
                else:
                    out.update(single)
            else:
                out[key] = _clean(options, prefix)
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _clean(v, prefix) for name, v in value.items()}
        else:
            out[key] = _clean(value, prefix)
    if out.get("type") == "object" and "additionalProperties" not in out and "properties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out


_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")
_PARAMETER_TYPES = {
    "limit": "integer",
    "timeoutSeconds": "integer",
    "gracePeriodSeconds": "integer",
    "watch": "boolean",
    "allowWatchBookmarks": "boolean",
    "sendInitialEvents": "boolean",
    "force": "boolean",
}
_LIST_PARAMETERS = (
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "watch",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "timeoutSeconds",
)
_PATCH_MEDIA_TYPES = {
    "application/json-patch+json": {"type": "array", "items": {"type": "object"}},
    "application/merge-patch+json": {"type": "object"},
    "application/strategic-merge-patch+json": {"type": "object"},
    "application/apply-patch+yaml": {"type": "object"},
}


def _parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": _PARAMETER_TYPES.get(name, "string")}}


def _operation(
    gvk: dict[str, str],
    action: str,
    ref: str,
    parameters: tuple[str, ...] = (),
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    schema = {"$ref": ref}
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {"application/json": {"schema": schema}}}
    }
    if action == "post":
        responses["201"] = {"description": "Created", "content": {"application/json": {"schema": schema}}}
    operation: dict[str, Any] = {
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [_parameter(p) for p in parameters],
        "responses": responses,
    }
    if body is not None:
        operation["requestBody"] = body
    return operation


def _body(ref: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {"$ref": ref}}}}


def _patch_body(group: str) -> dict[str, Any]:
    """What a PATCH takes; strategic merge only on Kubernetes' own kinds (a custom kind refuses it, 415)."""
    builtin = is_builtin_group(group)
    content = {
        media: {"schema": schema}
        for media, schema in _PATCH_MEDIA_TYPES.items()
        if builtin or media != "application/strategic-merge-patch+json"
    }
    return {"required": True, "content": content}


def _path_parameters(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names]


def _paths(
    group: str,
    version: str,
    models: list[type[KubeObject]],
    schemas: dict[str, Any],
    prefix: str,
    keyed: dict[Any, Any],
) -> dict[str, Any]:
    """The operations kubectl inspects: which GVK a path serves and which query parameters its
    writes take (``fieldValidation`` on PATCH makes kubectl validate on the server); each path's
    parameters, each operation's query parameters and request body, as a client generated from the
    document needs them."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths: dict[str, Any] = {}
    delete_options = {"content": {"application/json": {"schema": {"type": "object"}}}}
    for model in models:
        ref = (
            "#/components/schemas/"
            + prefix
            + "."
            + keyed[(model, "validation")]["$ref"].removeprefix("#/$defs/")
        )
        gvk = {"group": group, "version": version, "kind": model.KIND}
        scope = f"{base}/namespaces/{{namespace}}" if model.NAMESPACED else base
        scoped = ("namespace",) if model.NAMESPACED else ()
        paths[f"{scope}/{model.PLURAL}"] = {
            "parameters": _path_parameters(*scoped),
            "get": _operation(gvk, "list", ref, _LIST_PARAMETERS),
            "post": _operation(gvk, "post", ref, _WRITE_PARAMETERS, _body(ref)),
        }
        paths[f"{scope}/{model.PLURAL}/{{name}}"] = {
            "parameters": _path_parameters(*scoped, "name"),
            "get": _operation(gvk, "get", ref, ("resourceVersion",)),
            "put": _operation(gvk, "put", ref, _WRITE_PARAMETERS, _body(ref)),
            "patch": _operation(gvk, "patch", ref, (*_WRITE_PARAMETERS, "force"), _patch_body(group)),
            "delete": _operation(
                gvk, "delete", ref, ("dryRun", "propagationPolicy", "gracePeriodSeconds"), delete_options
            ),
        }
        if model.HAS_STATUS:
            paths[f"{scope}/{model.PLURAL}/{{name}}/status"] = {
                "parameters": _path_parameters(*scoped, "name"),
                "get": _operation(gvk, "get", ref, ("resourceVersion",)),
                "put": _operation(gvk, "put", ref, _WRITE_PARAMETERS, _body(ref)),
                "patch": _operation(gvk, "patch", ref, (*_WRITE_PARAMETERS, "force"), _patch_body(group)),
            }
    return paths


def document(group: str, version: str, models: list[type[KubeObject]]) -> dict[str, Any]:
    prefix = _prefix(group, version)
    keyed, definitions = models_json_schema(
        [(m, "validation") for m in models], by_alias=True, ref_template="#/$defs/{model}"
    )
    schemas: dict[str, Any] = {}
    for name, schema in definitions.get("$defs", {}).items():
        schemas[f"{prefix}.{name}"] = _clean(schema, prefix)
    for model in models:
        ref = keyed[(model, "validation")]["$ref"].removeprefix("#/$defs/")
        if served_by_crd(model):  # published as the API server publishes the CRD's schema
            schemas[f"{prefix}.{ref}"] = crd_schema(model)
            schemas.setdefault(OBJECT_META, schemas[f"{prefix}.ObjectMeta"])
            continue
        schema = schemas[f"{prefix}.{ref}"]
        schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": model.KIND, "version": version}]
        if model.__doc__:
            schema.setdefault("description", " ".join(model.__doc__.split()))
    return {
        "openapi": "3.0.0",
        "info": {"title": "capa-py", "version": version},
        "paths": _paths(group, version, models, schemas, prefix, keyed),
        "components": {"schemas": schemas},
    }


@cache
def _documents(registry_id: int, registry: KindRegistry) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for group, versions in by_group(registry).items():
        for version, models in versions.items():
            docs[_path_key(group, version)] = document(group, version, models)
    return docs


def documents(registry: KindRegistry) -> dict[str, dict[str, Any]]:
    return _documents(id(registry), registry)


def index(registry: KindRegistry) -> dict[str, Any]:
    paths = {}
    for key, doc in sorted(documents(registry).items()):
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}
