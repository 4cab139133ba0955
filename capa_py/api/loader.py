"""Loading manifests: multi-document YAML or JSON files into validated objects.

Every problem is reported with the file, the document (its position and, when known, its kind and name) and
the field path, and loading is all-or-nothing: callers get either every object or a :class:`ManifestError`
listing every problem, so nothing is half-applied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from capa_py.api.meta import KubeObject
from capa_py.api.registry import REGISTRY, KindRegistry, UnknownKind


@dataclass(frozen=True)
class ManifestProblem:
    source: str
    document: int
    subject: str
    path: str
    message: str

    def __str__(self) -> str:
        # Document 0: the file itself (unreadable, not UTF-8), before any document.
        where = f"{self.source}: document {self.document}" if self.document else self.source
        if self.subject:
            where += f" ({self.subject})"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ManifestError(ValueError):
    """One or more manifest documents are invalid; ``problems`` lists each."""

    def __init__(self, problems: Sequence[ManifestProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_loc(loc: Iterable[int | str]) -> str:
    """``('spec', 'subnets', 0, 'cidrBlock')`` → ``spec.subnets[0].cidrBlock``; a map key that is not a
    field name is quoted: ``spec.networkInterfaces["aa:bb:cc:dd:ee:ff"].dhcp.ip``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif path and part != "[key]" and not _FIELD_NAME.match(part):
            path += f"[{json.dumps(part)}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _clean_message(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    if message == "Extra inputs are not permitted":
        return "unknown field"
    return message


def _subject(doc: dict[str, Any]) -> str:
    kind = doc.get("kind", "")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    namespace = meta.get("namespace", "") if isinstance(meta, dict) else ""
    if kind and name:
        # Any of them may be of the wrong type (a list, a number): the model's validation names that.
        return f"{kind} {f'{namespace}/' if namespace else ''}{name}"
    return str(kind)


MAX_DEPTH = 100
"""Mappings and lists nested deeper than this are refused (Kubernetes objects, CRDs' schemas included, stay
far within it; a deeper document is a mistake or an attack on the parser)."""


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests mappings and lists deeper than ``limit`` (without recursion)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping (PyYAML keeps the last one silently;
    kubectl's YAML reader refuses it)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # what a merge key (``<<``) brings in may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                    key_node.start_mark,
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members, refusing a name given twice (``json`` keeps the last one silently)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate key {key!r}")
        found[key] = value
    return found


def parse_documents(text: str, source: str) -> list[Any]:
    """Split a YAML stream or a JSON document (object, array or ``List``) into raw documents; a key given
    twice in one mapping is refused, naming its line."""
    stripped = text.lstrip()
    docs: list[Any] | None = None
    try:
        if stripped.startswith(("{", "[")):
            try:
                loaded: Any = json.loads(text, object_pairs_hook=_unique_pairs)
                docs = loaded if isinstance(loaded, list) else [loaded]
            except json.JSONDecodeError:
                if "\n---" not in text:
                    raise
                # Not one JSON document: a YAML stream whose first document is in flow style.
        if docs is None:
            docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except (yaml.YAMLError, ValueError) as exc:
        raise ManifestError([ManifestProblem(source, 1, "", "", f"cannot parse: {exc}")]) from exc
    except RecursionError as exc:
        problem = ManifestProblem(source, 1, "", "", f"cannot parse: nested deeper than {MAX_DEPTH} levels")
        raise ManifestError([problem]) from exc
    for index, doc in enumerate(docs, start=1):
        if _deeper_than(doc, MAX_DEPTH):
            problem = ManifestProblem(source, index, "", "", f"nested deeper than {MAX_DEPTH} levels")
            raise ManifestError([problem])
    flattened: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            flattened.extend(doc["items"])
        else:
            flattened.append(doc)
    return flattened


def load_objects(
    docs: Sequence[Any], source: str, registry: KindRegistry = REGISTRY, default_namespace: str = "default"
) -> list[KubeObject]:
    objects: list[KubeObject] = []
    problems: list[ManifestProblem] = []
    for index, doc in enumerate(docs, start=1):
        if not isinstance(doc, dict):
            problems.append(ManifestProblem(source, index, "", "", "a document must be a mapping"))
            continue
        subject = _subject(doc)
        api_version, kind = doc.get("apiVersion"), doc.get("kind")
        if not isinstance(api_version, str) or not api_version:
            problems.append(ManifestProblem(source, index, subject, "apiVersion", "required"))
            continue
        if not isinstance(kind, str) or not kind:
            problems.append(ManifestProblem(source, index, subject, "kind", "required"))
            continue
        try:
            model = registry.for_gvk(api_version, kind)
        except UnknownKind as exc:
            problems.append(ManifestProblem(source, index, subject, "kind", str(exc)))
            continue
        try:
            obj = model.model_validate(doc)
        except ValidationError as exc:
            for error in exc.errors():
                problems.append(
                    ManifestProblem(
                        source, index, subject, format_loc(error["loc"]), _clean_message(error["msg"])
                    )
                )
            continue
        if not obj.metadata.name:
            problems.append(ManifestProblem(source, index, subject, "metadata.name", "required"))
            continue
        if model.NAMESPACED and not obj.metadata.namespace:
            obj.metadata.namespace = default_namespace
        for issue in obj.semantic_issues():
            problems.append(ManifestProblem(source, index, subject, issue.path, issue.message))
        objects.append(obj)
    if problems:
        raise ManifestError(problems)
    return objects


def load_manifest_text(
    text: str, source: str = "<stdin>", registry: KindRegistry = REGISTRY
) -> list[KubeObject]:
    return load_objects(parse_documents(text, source), source, registry)


def load_manifests(paths: Sequence[str | Path], registry: KindRegistry = REGISTRY) -> list[KubeObject]:
    """Load every document of every file, or raise one :class:`ManifestError` naming all problems."""
    objects: list[KubeObject] = []
    problems: list[ManifestProblem] = []
    for path in paths:
        source = str(path)
        try:
            data = Path(path).read_bytes() if source != "-" else _read_stdin()
        except OSError as exc:
            problems.append(ManifestProblem(source, 0, "", "", f"cannot read: {exc.strerror or exc}"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            message = f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (save the file as UTF-8)"
            problems.append(ManifestProblem(source, 0, "", "", message))
            continue
        try:
            objects.extend(load_manifest_text(text, source, registry))
        except ManifestError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ManifestError(problems)
    return objects


def _read_stdin() -> bytes:
    import sys

    return sys.stdin.buffer.read()
