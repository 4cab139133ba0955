"""Structural OpenAPI v3 schemas for CustomResourceDefinitions, generated from the pydantic models.

The models are the source of truth for what a manifest may hold; a CRD's ``openAPIV3Schema`` is derived
from them so that a management cluster's API server refuses what ``capa apply`` refuses, wherever a schema
can say it. pydantic's JSON schema is the starting point; this module turns it into the *structural* form
the API server requires:

- every ``$ref`` is inlined (CRD schemas have no ``$defs``);
- ``X | None`` becomes ``X`` (an omitted field and a null one mean the same on the wire);
- a one-value ``Literal`` becomes an ``enum``; titles are dropped;
- a field's default becomes ``default:`` with the value the models give it, in its wire form with empty maps
  and lists and nulls left out (what ``capa serve`` stores, :meth:`~capa_py.api.meta.KubeObject.to_dict`):
  a default that is empty on the wire is not declared, and neither is one inside a free-form value. As with
  the models, the API server applies a default only where the field's parent exists (or is defaulted
  itself), so an object created on a management cluster is stored as ``capa serve`` stores it. Nothing is
  defaulted under ``metadata``, and no node is ``nullable`` (a null is pruned, then defaulted);
- ``additionalProperties: false`` (the models' ``extra="forbid"``) is dropped: the API server prunes
  unknown fields, and its strict field validation (kubectl's default) refuses them;
- a free-form value (``Any``, ``dict[str, Any]``) is marked ``x-kubernetes-preserve-unknown-fields`` — the
  only nodes without a ``type``;
- ``metadata`` is left to the API server (``type: object``), but for rules on ``metadata.name``.

Rules the models check that a schema can also express (an IPv4 CIDR's shape and netmask, a region's shape,
an AMI id's form, tag value lengths, the one API server port supported; a Hardware's interface count, DHCP
address, VLAN id and lease time, an OSIE's URL schemes, a Template's action count, timeouts) are added from
:data:`EXTRA_RULES`,
and a Cluster's name rules from :data:`METADATA_NAME_RULES`;
what it cannot express is listed in :data:`ADMISSION_ONLY` and checked by admission (the same
``semantic_issues``/validators ``capa apply`` runs).
"""

from __future__ import annotations

import copy
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter

from capa_py.api.meta import KubeObject, _prune_empty

JSONSchema = dict[str, Any]

_IPV4_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_CIDR_PATTERN = rf"^({_IPV4_OCTET}\.){{3}}{_IPV4_OCTET}/(1[6-9]|2[0-8])$"
"""An IPv4 CIDR block with a netmask AWS accepts for a VPC or a subnet (/16 to /28); host bits set
(``10.0.0.1/16``) are caught by admission only."""

AMI_ID_PATTERN = r"^ami-[0-9a-f]{8,17}$"

CLUSTER_NAME_RULES: JSONSchema = {"maxLength": 63, "pattern": r"^(?:[^s]|s(?:[^g]|$)|sg(?:[^-]|$))"}
"""A cluster name is a label value (at most 63 characters) and starts security group names, which AWS
refuses when they begin with ``sg-``. A CRD may restrict ``metadata.name``, nothing else of metadata."""

METADATA_NAME_RULES: dict[str, JSONSchema] = {"Cluster": CLUSTER_NAME_RULES}

REGION_PATTERN = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"
"""The shape of an AWS region name; whether botocore knows the region is checked by admission only."""

_TAG_VALUES: JSONSchema = {"additionalProperties": {"type": "string", "maxLength": 256}}

LABEL_VALUE_RULES: JSONSchema = {"maxLength": 63, "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}
"""A label value as Kubernetes accepts it (a label key cannot be checked: a structural schema has no rule on
map keys)."""

IPV4_PATTERN = rf"^({_IPV4_OCTET}\.){{3}}{_IPV4_OCTET}$"
HTTP_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]+"
"""An http(s) URL with a host; what else makes a URL valid is checked by admission."""
_INT32: JSONSchema = {"minimum": 0, "maximum": 2**31 - 1}

EXTRA_RULES: dict[tuple[str, str], JSONSchema] = {
    ("VPCSpec", "cidrBlock"): {"pattern": IPV4_CIDR_PATTERN},
    ("SubnetSpec", "cidrBlock"): {"pattern": IPV4_CIDR_PATTERN},
    ("VPCSpec", "tags"): _TAG_VALUES,
    ("SubnetSpec", "tags"): _TAG_VALUES,
    ("AWSClusterSpec", "region"): {"pattern": REGION_PATTERN},
    ("AWSClusterSpec", "additionalTags"): _TAG_VALUES,
    ("AWSMachineSpec", "additionalTags"): _TAG_VALUES,
    ("ClusterNetwork", "apiServerPort"): {"enum": [6443]},
    ("AMIReference", "id"): {"pattern": AMI_ID_PATTERN},
    ("TemplateObjectMeta", "labels"): {"additionalProperties": {"type": "string", **LABEL_VALUE_RULES}},
    ("HardwareSpec", "networkInterfaces"): {"minProperties": 1},
    ("HardwareSpec", "storageDevices"): {"items": {"type": "string", "pattern": "^/dev/[^/]"}},
    ("DHCP", "ip"): {"pattern": IPV4_PATTERN},
    ("DHCP", "vlanId"): {"minimum": 0, "maximum": 4094},
    ("DHCP", "leaseTime"): _INT32,
    ("OSIESpec", "kernelUrl"): {"pattern": HTTP_URL_PATTERN},
    ("OSIESpec", "initrdUrl"): {"pattern": HTTP_URL_PATTERN},
    ("TemplateSpec", "actions"): {"minItems": 1},
    ("Action", "timeout"): _INT32,
    ("WorkflowSpec", "timeout"): _INT32,
}
"""Per (model class, wire field name): schema keywords merged into the generated property."""

ADMISSION_ONLY: tuple[tuple[str, str], ...] = (
    ("AWSCluster spec.region", "a region botocore knows (the schema checks the shape only)"),
    ("AWSCluster spec.network.vpc.cidrBlock, subnets[].cidrBlock", "no host bits set"),
    (
        "AWSCluster spec.network.subnets",
        "inside the VPC block, not overlapping; cidrBlock and zone required "
        "without id; no tags on bring-your-own VPC or subnets",
    ),
    ("AWSCluster spec.network.vpc", "cidrBlock required when id is not set"),
    ("AWSCluster spec.network.subnets[].availabilityZone", "a zone of spec.region"),
    ("AWSCluster spec.controlPlaneLoadBalancer.name", "not starting with internal-"),
    ("tag keys (additionalTags, tags)", "1 to 128 characters, not starting with aws:"),
    ("AWSMachine spec.instanceType", "an instance type in botocore's EC2 model"),
    ("AWSMachine spec.rootVolume", "iops required for io1/io2, refused for types other than io1, io2, gp3"),
    ("immutable fields", "every update rule of immutable_issues (needs the old object)"),
    ("templates' spec.template.metadata.labels keys", "label keys Kubernetes accepts"),
    (
        "AWSMachineTemplate, AWSClusterTemplate, TinkerbellMachineTemplate spec.template.spec",
        "every admission rule of the kind stamped out (AWSMachine, AWSCluster, TinkerbellMachine), named "
        "under spec.template.spec; providerID and instanceID (hardwareName for Tinkerbell) not set",
    ),
    (
        "Hardware spec.networkInterfaces keys",
        "MAC addresses (colon, dash or dot notation), unique once normalised",
    ),
    (
        "Hardware spec.networkInterfaces[].dhcp",
        "required unless disableDhcp; netmask contiguous; gateway inside ip/netmask; ip not the network "
        "or broadcast address nor another interface's; hostname RFC 1123; nameservers IPv4, timeservers "
        "IPv4 or hostnames",
    ),
    ("Hardware spec.ipxe", "exactly one of inline or url; url an http(s) URL"),
    ("Hardware spec.osie.osieRef, spec.bmcRef", "name a DNS subdomain, namespace a DNS label"),
    ("Hardware spec.storageDevices", "device paths without empty, . or .. components, unique"),
    ("OSIE spec.kernelUrl, spec.initrdUrl", "a valid URL with a host (the schema checks the scheme)"),
    (
        "Template spec.actions",
        "names unique and set, image set; env names and volumes in Docker's form unless they hold {{",
    ),
    ("Template spec.env, spec.volumes", "env names and volumes in Docker's form unless they hold {{"),
    ("Workflow spec.hardwareRef, spec.templateRef", "name a DNS subdomain, namespace a DNS label"),
    ("Workflow spec.templateData", "JSON data nested at most 32 levels"),
)
"""What the models refuse that a CRD's schema does not: cross-field rules, rules on metadata, lookups in
botocore's data, and rules on updates. Admission (``capa serve``, or a validating webhook) checks them."""

INT_OR_STRING = "x-kubernetes-int-or-string"
"""A node holding an integer or a string (``intstr.IntOrString``): the models mark it in their JSON schema."""

_KEPT = (
    "type",
    "format",
    "description",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
)


class NotStructural(ValueError):
    """A model holds a type a structural schema cannot express (a union of several types)."""


def _with_extra_rules(defs: dict[str, JSONSchema]) -> dict[str, JSONSchema]:
    defs = copy.deepcopy(defs)
    for (model_name, field), rules in EXTRA_RULES.items():
        properties = defs.get(model_name, {}).get("properties", {})
        if field in properties:
            properties[field] = {**properties[field], **copy.deepcopy(rules)}
    return defs


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


Defaults = dict[str, dict[str, Any]]
"""Per model (by the name of its ``$defs`` entry): the wire name and wire value of each defaulted field."""

_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
"""A kind's own fields the API server sets or owns: never defaulted by a schema."""


def _model_classes(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model a kind's fields reach, by class name (pydantic's ``$defs`` key); a name two different
    classes share is left out (pydantic then names their entries otherwise)."""
    found: dict[str, type[BaseModel]] = {}
    shared: set[str] = set()

    def visit(annotation: Any) -> None:
        for argument in typing.get_args(annotation):
            visit(argument)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return
        seen = found.get(annotation.__name__)
        if seen is not None:
            if seen is not annotation:
                shared.add(annotation.__name__)
            return
        found[annotation.__name__] = annotation
        for field in annotation.model_fields.values():
            visit(field.annotation)

    visit(model)
    return {name: cls for name, cls in found.items() if name not in shared}


def wire_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The defaulted fields of one model: wire name → the default's wire form, where that is not empty."""
    defaults: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required() or field.exclude or field.annotation is None:
            continue
        value = field.get_default(call_default_factory=True, validated_data={})
        wire = _prune_empty(
            TypeAdapter(field.annotation).dump_python(value, mode="json", by_alias=True, exclude_none=True)
        )
        if wire not in (None, {}, []):
            defaults[field.alias or name] = wire
    return defaults


def _defaults(model: type[KubeObject]) -> Defaults:
    found = {name: wire_defaults(cls) for name, cls in _model_classes(model).items()}
    found[model.__name__] = {k: v for k, v in wire_defaults(model).items() if k not in _ROOT_FIELDS}
    return found


def _convert(
    node: JSONSchema,
    defs: dict[str, JSONSchema],
    path: str,
    defaults: Defaults | None = None,
    owner: str | None = None,
) -> JSONSchema:
    """One node in structural form; ``owner`` names the model whose fields ``node``'s properties are, to
    look their defaults up in ``defaults``."""
    defaults = defaults or {}
    extra = {k: v for k, v in node.items() if k in _KEPT or k == "additionalProperties"}
    if node.get(INT_OR_STRING):
        return {
            INT_OR_STRING: True,
            **({"description": node["description"]} if "description" in node else {}),
        }
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        return _merge(_convert(copy.deepcopy(target), defs, path, defaults, name), extra, defs, path)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise NotStructural(f"{path}: a union of {len(options)} types has no structural schema")
        return _merge(_convert(copy.deepcopy(options[0]), defs, path, defaults), extra, defs, path)
    if "const" in node:
        node = {**node, "enum": [node["const"]], "type": node.get("type", _json_type(node["const"]))}
    if "enum" in node and "type" not in node:
        node = {**node, "type": _json_type(node["enum"][0])}
    if not node.get("type"):
        # Any: free form, the one place a node may go without a type.
        return {"x-kubernetes-preserve-unknown-fields": True}
    out: JSONSchema = {k: node[k] for k in _KEPT if k in node}
    if "description" in out:
        out["description"] = " ".join(out["description"].replace("``", "").split())
    if node["type"] == "object":
        if "properties" in node:
            out["properties"] = {
                name: _convert(copy.deepcopy(sub), defs, f"{path}.{name}", defaults)
                for name, sub in node["properties"].items()
            }
            for name, value in defaults.get(owner or "", {}).items():
                prop = out["properties"].get(name)
                if prop is not None and "type" in prop:
                    prop["default"] = value
            if node.get("required"):
                out["required"] = sorted(node["required"])
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            converted = _convert(copy.deepcopy(additional), defs, f"{path}[*]", defaults)
            if converted == {"x-kubernetes-preserve-unknown-fields": True}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out["additionalProperties"] = converted
        elif additional is True or ("properties" not in node and additional is None):
            out["x-kubernetes-preserve-unknown-fields"] = True
    if node["type"] == "array":
        out["items"] = _convert(copy.deepcopy(node.get("items", {})), defs, f"{path}[]", defaults)
    return out


def _merge(base: JSONSchema, extra: JSONSchema, defs: dict[str, JSONSchema], path: str) -> JSONSchema:
    """Keywords set beside a ``$ref`` or an ``anyOf`` (an extra rule, a constraint) apply to the target."""
    merged = dict(base)
    for key, value in extra.items():
        if key == "additionalProperties":
            if isinstance(value, dict) and "additionalProperties" in merged:
                merged["additionalProperties"] = {**merged["additionalProperties"], **value}
            continue
        if key != "type":
            merged[key] = value
    return merged


def structural_schema(model: type[KubeObject]) -> JSONSchema:
    """The ``openAPIV3Schema`` of a kind: its wire form with the models' types and constraints."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = _with_extra_rules(raw.pop("$defs", {}))
    schema = _convert(raw, defs, model.KIND, _defaults(model), model.__name__)
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}
    if model.KIND in METADATA_NAME_RULES:
        name_rules = {"type": "string", **METADATA_NAME_RULES[model.KIND]}
        properties["metadata"]["properties"] = {"name": name_rules}
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    if doc:
        schema["description"] = " ".join(doc.split())
    return schema


def non_structural_nodes(schema: JSONSchema, path: str = "") -> list[str]:
    """Paths of nodes without a ``type`` that are not free form (empty for a structural schema)."""
    problems: list[str] = []
    if (
        "type" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
        and not schema.get(INT_OR_STRING)
    ):
        problems.append(path or "<root>")
    for name, sub in schema.get("properties", {}).items():
        problems += non_structural_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += non_structural_nodes(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        problems += non_structural_nodes(schema["items"], f"{path}[]")
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
        allowed = (
            forbidden == "additionalProperties" and isinstance(schema[forbidden], dict)
            if forbidden in schema
            else True
        )
        if not allowed:
            problems.append(f"{path or '<root>'}: {forbidden}")
    return problems


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(node: Any, schema: JSONSchema, path: str, unknown: list[str]) -> Any:
    """``node`` without the fields ``schema`` does not declare, each one's path added to ``unknown``."""
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(node, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and isinstance(additional, dict):
            return {k: prune(v, additional, join_path(path, k), unknown) for k, v in node.items()}
        if properties is None:
            if preserve or schema.get("type") != "object":
                return node
            properties = {}
        kept: dict[str, Any] = {}
        for key, value in node.items():
            if key in properties:
                kept[key] = prune(value, properties[key], join_path(path, key), unknown)
            elif preserve:
                kept[key] = value
            else:
                unknown.append(join_path(path, key))
        return kept
    if isinstance(node, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"], f"{path}[{i}]", unknown) for i, item in enumerate(node)]
    return node
