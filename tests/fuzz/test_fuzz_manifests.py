"""Fuzzing the manifest loader: arbitrary YAML and JSON documents, and mutations of the examples, each end
in loaded objects or the loader's own ``ManifestError`` (never another exception), and every problem it
reports names where it is. Bounded (``max_examples``, no deadline on a loaded machine) so the suite stays
fast; ``CAPA_FUZZ_EXAMPLES=2000`` runs a longer search."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capa_py.api.loader import ManifestError, load_manifest_text, load_objects, parse_documents

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml"))
EXAMPLE_DOCS: list[dict[str, Any]] = [
    doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)
]
FUZZ = settings(
    max_examples=int(os.environ.get("CAPA_FUZZ_EXAMPLES", "100")),
    # The suite's run is repeatable (a fixed seed); CAPA_FUZZ_EXAMPLES=N searches anew with N examples.
    derandomize="CAPA_FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=25,
)


def loads_or_refuses(text: str) -> None:
    """The loader's contract: objects, or one ManifestError whose problems each say where they are."""
    problems = []
    try:
        objects = load_manifest_text(text, "fuzz.yaml")
    except ManifestError as exc:
        objects, problems = [], exc.problems
        assert problems
    for problem in problems:
        assert problem.source == "fuzz.yaml"
        assert problem.message
    for obj in objects:
        assert obj.metadata.name


@FUZZ
@given(st.text(max_size=300))
def test_any_text_loads_or_is_refused(text: str) -> None:
    loads_or_refuses(text)


@FUZZ
@given(st.lists(json_values, max_size=3))
def test_any_yaml_documents_load_or_are_refused(docs: list[Any]) -> None:
    loads_or_refuses(yaml.safe_dump_all(docs))


@FUZZ
@given(json_values)
def test_any_json_document_loads_or_is_refused(doc: Any) -> None:
    loads_or_refuses(json.dumps(doc))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_examples(draw: st.DrawFn) -> dict[str, Any]:
    """One of the examples with a few of its values replaced, removed, or given a new neighbour."""
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DOCS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return doc


@FUZZ
@given(mutated_examples())
def test_mutated_examples_load_or_are_refused(doc: dict[str, Any]) -> None:
    loads_or_refuses(yaml.safe_dump(doc))
    problems = []
    try:
        load_objects(parse_documents(json.dumps(doc), "fuzz.json"), "fuzz.json")
    except ManifestError as exc:
        problems = exc.problems
    assert all(problem.message for problem in problems)


def test_the_examples_load() -> None:
    """The mutations start from documents that load."""
    for path in EXAMPLES:
        load_manifest_text(path.read_text(), str(path))


def test_a_namespace_of_the_wrong_type_is_a_manifest_problem() -> None:
    """Found by the fuzzer: a list as ``metadata.namespace`` raised TypeError while naming the document."""
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ["a"]}}
    problems = []
    try:
        load_manifest_text(json.dumps(doc), "fuzz.json")
    except ManifestError as exc:
        problems = exc.problems
    assert [p.path for p in problems] == ["metadata.namespace"]
