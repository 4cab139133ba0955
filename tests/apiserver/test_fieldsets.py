"""Field sets and their ``FieldsV1`` form: the encoding the API server writes, read back unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capa_py.apiserver import fieldsets
from capa_py.apiserver.fieldsets import Path

DATA = fieldsets.field("data")

# What the real API server recorded for ``kubectl create`` of a ConfigMap with a label and two keys.
CREATED = {"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:l": {}}}}


def test_a_node_owned_with_its_children_is_marked_with_a_dot() -> None:
    paths = fieldsets.decode(CREATED)
    assert (DATA,) in paths
    assert (DATA, fieldsets.field("a")) in paths
    assert (fieldsets.field("metadata"),) not in paths, "a node holding only children is not owned"
    assert fieldsets.encode(paths) == CREATED
    assert list(fieldsets.encode(paths)["f:data"]) == [".", "f:a", "f:b"], "'.' first, then the children"


def test_list_items_are_named_by_key_by_value_and_by_index() -> None:
    container = fieldsets.key({"name": "nginx"})
    port = fieldsets.key({"protocol": "TCP", "containerPort": 80})
    assert container == 'k:{"name":"nginx"}'
    assert port == 'k:{"containerPort":80,"protocol":"TCP"}', "keys sorted, compact JSON"
    assert fieldsets.value("a/b") == 'v:"a/b"'
    assert fieldsets.index(3) == "i:3"
    assert fieldsets.parse_element('k:{ "protocol": "TCP", "containerPort": 80 }') == port


def test_paths_print_as_in_conflict_messages() -> None:
    path = (
        fieldsets.field("spec"),
        fieldsets.field("containers"),
        fieldsets.key({"name": "c"}),
        fieldsets.field("env"),
        fieldsets.key({"name": "A"}),
        fieldsets.field("value"),
    )
    assert fieldsets.path_string(path) == '.spec.containers[name="c"].env[name="A"].value'
    assert fieldsets.path_string((fieldsets.field("f"), fieldsets.value("x"))) == '.f[="x"]'
    assert fieldsets.path_string((fieldsets.field("f"), fieldsets.index(2))) == ".f[2]"


def test_paths_are_listed_members_first_then_children() -> None:
    containers = (fieldsets.field("spec"), fieldsets.field("containers"), fieldsets.key({"name": "c"}))
    env_value = (*containers, fieldsets.field("env"), fieldsets.key({"name": "A"}), fieldsets.field("value"))
    image = (*containers, fieldsets.field("image"))
    # As the real API server lists the fields of one manager's conflicts.
    assert list(fieldsets.iterate({env_value, image})) == [image, env_value]


@pytest.mark.parametrize(
    "document",
    [[], {"f:a": []}, {"x:a": {}}, {".": {}}, {"k:[1]": {}}, {"k:{": {}}, {"i:x": {}}],
)
def test_malformed_documents_are_refused(document: Any) -> None:
    with pytest.raises(ValueError, match=r"fieldsV1|element|key"):
        fieldsets.decode(document)


_names = st.text(alphabet="abcxyz-./", min_size=1, max_size=6)
_scalars = st.one_of(st.integers(-5, 100), st.text(max_size=5), st.booleans())
_elements = st.one_of(
    _names.map(fieldsets.field),
    st.dictionaries(_names, _scalars, min_size=1, max_size=2).map(fieldsets.key),
    _scalars.map(fieldsets.value),
    st.integers(0, 20).map(fieldsets.index),
)
_paths: st.SearchStrategy[Path] = st.lists(_elements, min_size=1, max_size=4).map(tuple)


@given(st.frozensets(_paths, max_size=12))
def test_encoding_round_trips(paths: frozenset[Path]) -> None:
    document = fieldsets.encode(paths)
    assert fieldsets.decode(document) == paths
    assert fieldsets.decode(json.loads(json.dumps(document))) == paths, "through JSON as well"


@given(st.frozensets(_paths, max_size=12))
def test_iteration_lists_every_path_once(paths: frozenset[Path]) -> None:
    listed = list(fieldsets.iterate(paths))
    assert sorted(listed) == sorted(paths)
