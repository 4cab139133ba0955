"""Reading the manifests :mod:`capa_py.workflow.kubeapply` applies: a file or an ``http(s)://`` URL, split
into its documents (``kind: List`` flattened), each checked to have what applying needs; and the errors
applying raises. Neither the errors nor the log lines carry a document's contents."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from capa_py.logging import get_logger

_log = get_logger("workflow.kubeapply")

Outcome = Literal["created", "configured", "unchanged"]


class ManifestError(ValueError):
    """A manifest or one of its documents cannot be read or applied; the message names which."""

    def __init__(self, message: str, applied: Sequence[AppliedDocument] = ()) -> None:
        super().__init__(message)
        self.applied: list[AppliedDocument] = list(applied)


class ClusterUnreachable(ConnectionError):
    """The cluster's API server did not answer; applying again later is safe."""


@dataclass(frozen=True)
class AppliedDocument:
    """One document applied: ``ref`` is ``Kind/namespace/name`` (``Kind/name`` when cluster-scoped)."""

    ref: str
    outcome: Outcome


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, without the offending text (which may be a secret)."""
    problem = getattr(exc, "problem", None) or "not valid YAML"
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return str(problem)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"


def _fetch(source: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(source, timeout=timeout) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        raise ManifestError(f"{source}: cannot be fetched: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ManifestError(f"{source}: cannot be fetched: {reason}") from exc


def _read_file(source: str, base_dir: Path) -> bytes:
    path = base_dir / source
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise ManifestError(f"{source}: no such file ({path})") from exc
    except OSError as exc:
        raise ManifestError(f"{source}: cannot be read ({path}): {exc.strerror or exc}") from exc


def _check_document(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` when it has what applying needs; ``where`` names it (``cni.yaml: document 3``)."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: a document must be a mapping, not {type(doc).__name__}")
    for field in ("apiVersion", "kind"):
        value = doc.get(field)
        if value is None or value == "":
            raise ManifestError(f"{where}: {field}: required")
        if not isinstance(value, str):
            raise ManifestError(f"{where}: {field}: must be a string")
    metadata = doc.get("metadata")
    if metadata is None:
        raise ManifestError(f"{where}: metadata.name: required")
    if not isinstance(metadata, dict):
        raise ManifestError(f"{where}: metadata: must be a mapping")
    name = metadata.get("name")
    if name is None or name == "":
        raise ManifestError(f"{where}: metadata.name: required")
    if not isinstance(name, str):
        raise ManifestError(f"{where}: metadata.name: must be a string")
    namespace = metadata.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ManifestError(f"{where}: metadata.namespace: must be a string")
    return doc


def flatten_document(doc: Any, where: str) -> list[dict[str, Any]]:
    """A ``kind: List`` (what ``kubectl get -o yaml`` prints) as its items, anything else as itself."""
    if isinstance(doc, dict) and doc.get("kind") == "List":
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError(f"{where}: items: must be a list")
        return [_check_document(item, f"{where}: items[{i}]") for i, item in enumerate(items)]
    return [_check_document(doc, where)]


def parse_manifest(text: str, source: str) -> list[dict[str, Any]]:
    """The documents of a multi-document YAML text, ``source`` naming it in errors: empty documents
    skipped, ``kind: List`` flattened. Documents are numbered from 1 as they stand in the text, empty ones
    included, so the number in an error is the one a reader counts."""
    docs: list[dict[str, Any]] = []
    number = 0
    loader = yaml.safe_load_all(text)
    while True:
        number += 1
        try:
            doc = next(loader)
        except StopIteration:
            break
        except yaml.YAMLError as exc:
            raise ManifestError(f"{source}: document {number}: {yaml_problem(exc)}") from exc
        if doc is None:
            continue
        docs.extend(flatten_document(doc, f"{source}: document {number}"))
    return docs


def read_manifest(source: str, base_dir: Path, *, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The documents of a manifest: a file path (relative to ``base_dir``, or absolute) or an ``http(s)://``
    URL, fetched with ``timeout`` seconds to answer. Every document has ``apiVersion``, ``kind`` and
    ``metadata.name``; a missing file, a URL that cannot be fetched, text that is not UTF-8 YAML or a
    document without one of those fields is a :class:`ManifestError` naming ``source``."""
    is_url = source.startswith(("http://", "https://"))
    data = _fetch(source, timeout) if is_url else _read_file(source, base_dir)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{source}: not UTF-8 text (byte {exc.start})") from exc
    docs = parse_manifest(text, source)
    _log.debug("manifest read", source=source, documents=len(docs))
    return docs
