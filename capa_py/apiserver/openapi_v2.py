"""OpenAPI v2 (``/openapi/v2``), as kubectl 1.27 and 1.28 read it for ``apply``, ``diff``, ``edit`` and
``explain``.

The document is derived from the same model schemas as the OpenAPI v3 documents (:mod:`capa_py.apiserver
.openapi`): every group-version's schemas become ``definitions`` (``#/components/schemas/`` references become
``#/definitions/``, ``nullable`` is dropped since Swagger 2.0 has no null type, a single-reference ``allOf``
is the reference itself) and its operations become ``paths``, with the ``x-kubernetes-action`` and
``x-kubernetes-group-version-kind`` extensions and the write parameters (``fieldValidation`` among them).

Clients of that era ask only for the protobuf form (``Accept: application/com.github.proto-openapi.spec.v2@
v1.0+protobuf``) and unmarshal the body as gnostic's ``openapi.v2.Document``; :func:`to_protobuf` encodes the
JSON document in that form with :mod:`capa_py.apiserver.proto.openapi_v2_pb2`. Extension, default and enum
values travel as YAML text, as the API server writes them. :func:`negotiate` picks JSON or protobuf from an
``Accept`` header as the API server does (JSON when none is given, ``None`` for a 406).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import yaml

from capa_py.api.registry import KindRegistry
from capa_py.apiserver import openapi
from capa_py.apiserver.proto import openapi_v2_pb2 as pb

JSON = "application/json"
PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The content type the API server answers the protobuf form with (``.v1.0``; clients ask with ``@v1.0``)."""
PROTOBUF_ACCEPTED = (PROTOBUF, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
JSON_ACCEPTED = (JSON, "application/*", "*/*")

_V3_REF = "#/components/schemas/"
_V2_REF = "#/definitions/"


def negotiate(accept: str) -> str | None:
    """The content type to answer ``accept`` with: the acceptable media type of highest quality, the
    earliest of equal ones; JSON when the header is empty; ``None`` when nothing offered is acceptable."""
    if not accept.strip():
        return JSON
    ranked: list[tuple[float, int, str]] = []
    for position, item in enumerate(accept.split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0:
            ranked.append((-quality, position, media.lower()))
    for _, _, media in sorted(ranked):
        if media in PROTOBUF_ACCEPTED:
            return PROTOBUF
        if media in JSON_ACCEPTED:
            return JSON
    return None


def _schema(node: Any) -> Any:
    """A v3 schema (as :mod:`openapi` writes it) in Swagger 2.0's form."""
    if isinstance(node, list):
        return [_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "nullable" or (key == "default" and value is None):
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace(_V3_REF, _V2_REF)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _schema(v) for name, v in value.items()}
        elif key == "x-kubernetes-group-version-kind":
            out[key] = value
        else:
            out[key] = _schema(value)
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        # A reference with siblings (a description, a default): v2 readers take ``$ref`` and its siblings.
        del out["allOf"]
        out["$ref"] = all_of[0]["$ref"]
        out.pop("type", None)
    return out


def _query(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "type": kind, "uniqueItems": True}


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "type": "string", "uniqueItems": True}


def _operation(v3: dict[str, Any], method: str) -> dict[str, Any]:
    schema = v3["responses"]["200"]["content"][JSON]["schema"]
    ref = {"$ref": schema["$ref"].replace(_V3_REF, _V2_REF)}
    parameters: list[dict[str, Any]] = []
    if method in ("put", "post", "patch"):
        parameters.append({"name": "body", "in": "body", "required": True, "schema": ref})
    parameters += [_query(p["name"], p["schema"]["type"]) for p in v3.get("parameters", [])]
    consumes = [JSON]
    if method == "patch":
        consumes = ["application/json-patch+json", "application/merge-patch+json"]
    responses: dict[str, Any] = {"200": {"description": "OK", "schema": ref}}
    if method in ("put", "post"):
        responses["201"] = {"description": "Created", "schema": ref}
    return {
        "consumes": consumes,
        "produces": [JSON],
        "schemes": ["https"],
        "parameters": parameters,
        "responses": responses,
        "x-kubernetes-action": v3["x-kubernetes-action"],
        "x-kubernetes-group-version-kind": v3["x-kubernetes-group-version-kind"],
    }


def _path_item(path: str, v3: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {
        method: _operation(op, method) for method, op in v3.items() if method != "parameters"
    }
    names = [segment[1:-1] for segment in path.split("/") if segment.startswith("{")]
    item["parameters"] = [_path_parameter(name) for name in names]
    return item


@cache
def _document(registry_id: int, registry: KindRegistry) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for _, doc in sorted(openapi.documents(registry).items()):
        for name, schema in doc["components"]["schemas"].items():
            definitions[name] = _schema(schema)
        for path, item in doc["paths"].items():
            paths[path] = _path_item(path, item)
    return {
        "swagger": "2.0",
        "info": {"title": "capa-py", "version": "v2"},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
    }


def document(registry: KindRegistry) -> dict[str, Any]:
    """The Swagger 2.0 document of every kind the registry serves."""
    return _document(id(registry), registry)


@cache
def _encoded(registry_id: int, registry: KindRegistry) -> tuple[bytes, bytes, str]:
    doc = document(registry)
    as_json = json.dumps(doc, separators=(",", ":")).encode()
    etag = '"' + hashlib.sha512(as_json).hexdigest().upper() + '"'
    return as_json, to_protobuf(doc).SerializeToString(deterministic=True), etag


def encoded(registry: KindRegistry) -> tuple[bytes, bytes, str]:
    """The document as JSON, as protobuf, and the entity tag both are served with."""
    return _encoded(id(registry), registry)


# -- protobuf -------------------------------------------------------------------------------------------


def _yaml(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=False, sort_keys=False)
    return text.removesuffix("...\n")


def _any(value: Any) -> pb.Any:
    return pb.Any(yaml=_yaml(value))


def _extensions(node: dict[str, Any]) -> list[pb.NamedAny]:
    return [pb.NamedAny(name=k, value=_any(v)) for k, v in node.items() if k.startswith("x-")]


_SCHEMA_SCALARS = {
    "format": "format",
    "title": "title",
    "description": "description",
    "pattern": "pattern",
    "discriminator": "discriminator",
    "multipleOf": "multiple_of",
    "maximum": "maximum",
    "minimum": "minimum",
    "exclusiveMaximum": "exclusive_maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "maxLength": "max_length",
    "minLength": "min_length",
    "maxItems": "max_items",
    "minItems": "min_items",
    "maxProperties": "max_properties",
    "minProperties": "min_properties",
    "uniqueItems": "unique_items",
    "readOnly": "read_only",
}


def _pb_schema(node: dict[str, Any]) -> pb.Schema:
    schema = pb.Schema(vendor_extension=_extensions(node))
    for key, attribute in _SCHEMA_SCALARS.items():
        if key in node:
            setattr(schema, attribute, node[key])
    if "$ref" in node:
        schema._ref = node["$ref"]
    if "default" in node:
        schema.default.CopyFrom(_any(node["default"]))
    if "example" in node:
        schema.example.CopyFrom(_any(node["example"]))
    schema.required.extend(node.get("required", []))
    schema.enum.extend(_any(v) for v in node.get("enum", []))
    additional = node.get("additionalProperties")
    if isinstance(additional, bool):
        schema.additional_properties.boolean = additional
    elif isinstance(additional, dict):
        schema.additional_properties.schema.CopyFrom(_pb_schema(additional))
    kind = node.get("type")
    if kind is not None:
        schema.type.value.extend(kind if isinstance(kind, list) else [kind])
    items = node.get("items")
    if items is not None:
        schema.items.schema.extend(_pb_schema(i) for i in (items if isinstance(items, list) else [items]))
    schema.all_of.extend(_pb_schema(s) for s in node.get("allOf", []))
    if "properties" in node:
        schema.properties.SetInParent()
        for name, value in node["properties"].items():
            schema.properties.additional_properties.add(name=name, value=_pb_schema(value))
    return schema


def _pb_parameter(node: dict[str, Any]) -> pb.ParametersItem:
    item = pb.ParametersItem()
    where = node["in"]
    if where == "body":
        body = item.parameter.body_parameter
        body.name, body.required = node["name"], node.get("required", False)
        setattr(body, "in", where)
        body.schema.CopyFrom(_pb_schema(node["schema"]))
        return item
    holder = item.parameter.non_body_parameter
    sub: pb.QueryParameterSubSchema | pb.PathParameterSubSchema = (
        holder.path_parameter_sub_schema if where == "path" else holder.query_parameter_sub_schema
    )
    sub.name, sub.type = node["name"], node.get("type", "")
    sub.required, sub.unique_items = node.get("required", False), node.get("uniqueItems", False)
    sub.description = node.get("description", "")
    setattr(sub, "in", where)
    return item


def _pb_operation(node: dict[str, Any]) -> pb.Operation:
    operation = pb.Operation(
        consumes=node.get("consumes", []),
        produces=node.get("produces", []),
        schemes=node.get("schemes", []),
        parameters=[_pb_parameter(p) for p in node.get("parameters", [])],
        vendor_extension=_extensions(node),
    )
    for code, response in node.get("responses", {}).items():
        value = pb.ResponseValue()
        value.response.description = response.get("description", "")
        if "schema" in response:
            value.response.schema.schema.CopyFrom(_pb_schema(response["schema"]))
        operation.responses.response_code.add(name=code, value=value)
    return operation


def to_protobuf(doc: dict[str, Any]) -> pb.Document:
    """A Swagger 2.0 JSON document as gnostic's ``openapi.v2.Document``."""
    message = pb.Document(swagger=doc["swagger"], vendor_extension=_extensions(doc))
    message.info.title = doc["info"]["title"]
    message.info.version = doc["info"]["version"]
    message.paths.SetInParent()
    for path, item in doc.get("paths", {}).items():
        path_item = pb.PathItem(
            parameters=[_pb_parameter(p) for p in item.get("parameters", [])],
            vendor_extension=_extensions(item),
        )
        for method in ("get", "put", "post", "delete", "patch"):
            if method in item:
                getattr(path_item, method).CopyFrom(_pb_operation(item[method]))
        message.paths.path.add(name=path, value=path_item)
    message.definitions.SetInParent()
    for name, schema in doc.get("definitions", {}).items():
        message.definitions.additional_properties.add(name=name, value=_pb_schema(schema))
    return message
