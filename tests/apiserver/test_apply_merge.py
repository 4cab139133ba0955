"""The structured merge of server-side apply (:mod:`capa_py.apiserver.apply`): field sets, comparison,
merging, pruning and ownership, on Kubernetes' own kinds (strategic merge keys) and on capa-py's CRD
schemas, with properties checked on generated objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capa_py.api.aws import AWSCluster
from capa_py.api.core import ConfigMap
from capa_py.api.workloads import Deployment
from capa_py.apiserver import apply, fieldsets
from capa_py.apiserver.apply import Conflicts, Ignored, ManagerKey
from capa_py.apiserver.fieldsets import FieldSet, Path

BUILT_IN = apply.structure_of(Deployment)
M1: ManagerKey = ("m1", "Apply", "", "")
M2: ManagerKey = ("m2", "Apply", "", "")
EDIT: ManagerKey = ("kubectl-edit", "Update", "apps/v1", "")
NONE = Ignored()


def p(*parts: str) -> Path:
    """A path from field names and ready-made elements (``k:``, ``v:``)."""
    return tuple(x if x[:2] in ("k:", "v:", "i:") else fieldsets.field(x) for x in parts)


def deployment(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": list(containers)}}, **extra}}


CONTAINERS = ("spec", "template", "spec", "containers")


def test_an_apply_owns_the_leaves_and_the_items_of_its_configuration() -> None:
    config = deployment(
        {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]},
        selector={"matchLabels": {"app": "d"}},
    )
    c = fieldsets.key({"name": "c"})
    port = fieldsets.key({"containerPort": 80, "protocol": "TCP"})
    assert apply.field_set(config, BUILT_IN) == {
        p(*CONTAINERS, c),
        p(*CONTAINERS, c, "name"),
        p(*CONTAINERS, c, "image"),
        p(*CONTAINERS, c, "ports", port),
        p(*CONTAINERS, c, "ports", port, "containerPort"),
        p("spec", "selector"),  # a label selector is atomic
    }


def test_a_crd_list_without_a_list_type_is_atomic() -> None:
    structure = apply.structure_of(AWSCluster)
    config = {"spec": {"network": {"subnets": [{"cidrBlock": "10.0.0.0/20"}]}}}
    assert apply.field_set(config, structure) == {p("spec", "network", "subnets")}


def test_metadata_finalizers_are_a_set_and_owner_references_atomic_items() -> None:
    structure = apply.structure_of(ConfigMap)
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u1"}
    created = apply.compare({}, {"metadata": {"finalizers": ["a/b"], "ownerReferences": [owner]}}, structure)
    # What the real API server records for a create with one finalizer and one owner.
    assert created.added == {
        p("metadata"),
        p("metadata", "finalizers"),
        p("metadata", "finalizers", fieldsets.value("a/b")),
        p("metadata", "ownerReferences"),
        p("metadata", "ownerReferences", fieldsets.key({"uid": "u1"})),
    }


def test_comparison_reports_added_removed_and_modified_fields() -> None:
    old = {"data": {"a": "1", "b": "2"}}
    new = {"data": {"a": "9", "c": "3"}}
    compared = apply.compare(old, new, apply.FREE)
    assert compared.modified == {p("data", "a")}
    assert compared.added == {p("data", "c")}
    assert compared.removed == {p("data", "b")}


def test_a_keyed_list_merges_item_by_item_keeping_items_only_in_the_live_object() -> None:
    live = deployment({"name": "a", "image": "1"}, {"name": "b", "image": "2"})
    config = deployment({"name": "c", "image": "3"}, {"name": "a", "env": [{"name": "X", "value": "x"}]})
    merged = apply.merge(live, config, BUILT_IN)
    assert merged["spec"]["template"]["spec"]["containers"] == [
        {"name": "c", "image": "3"},
        {"name": "a", "image": "1", "env": [{"name": "X", "value": "x"}]},
        {"name": "b", "image": "2"},
    ]


def test_applying_a_value_another_manager_owns_conflicts_unless_forced_or_equal() -> None:
    live, managers = apply.apply({}, {"data": {"a": "1"}}, {}, M1, apply.FREE, NONE, force=False)
    with pytest.raises(Conflicts) as refused:
        apply.apply(live, {"data": {"a": "2"}}, managers, M2, apply.FREE, NONE, force=False)
    assert refused.value.by_manager == {M1: frozenset({p("data", "a")})}

    shared, both = apply.apply(live, {"data": {"a": "1"}}, managers, M2, apply.FREE, NONE, force=False)
    assert shared == live
    assert both == {M1: {p("data", "a")}, M2: {p("data", "a")}}, "the same value: owned by both"

    forced, taken = apply.apply(live, {"data": {"a": "2"}}, managers, M2, apply.FREE, NONE, force=True)
    assert forced == {"data": {"a": "2"}}
    assert taken == {M2: {p("data", "a")}}, "m1 owned nothing else: its entry is gone"


def test_a_field_no_longer_applied_is_removed_unless_someone_else_owns_it() -> None:
    live, managers = apply.apply({}, {"data": {"a": "1", "b": "2"}}, {}, M1, apply.FREE, NONE, force=False)
    live, managers = apply.apply(live, {"data": {"b": "2"}}, managers, M2, apply.FREE, NONE, force=False)
    after, owners = apply.apply(live, {"data": {}}, managers, M1, apply.FREE, NONE, force=False)
    assert after == {"data": {"b": "2"}}, "a goes (m1 alone owned it), b stays (m2 owns it too)"
    assert owners[M2] == {p("data", "b")}


def test_an_update_owns_what_it_changed_and_takes_it_from_the_others() -> None:
    live, managers = apply.apply(
        {}, deployment({"name": "c", "image": "1"}), {}, M1, BUILT_IN, NONE, force=False
    )
    edited = copy.deepcopy(live)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "2"
    owners, changed = apply.update(live, edited, managers, EDIT, BUILT_IN, NONE)
    image = p(*CONTAINERS, fieldsets.key({"name": "c"}), "image")
    assert changed
    assert owners[EDIT] == {image}
    assert image not in owners[M1]
    unchanged, changed_again = apply.update(edited, edited, owners, EDIT, BUILT_IN, NONE)
    assert (unchanged, changed_again) == (owners, False)


def test_ignored_fields_are_owned_by_nobody() -> None:
    ignored = Ignored(exact=frozenset({p("metadata"), p("metadata", "name")}), below=frozenset({p("status")}))
    config = {"metadata": {"name": "x", "labels": {"a": "1"}}, "status": {"ready": True}}
    _, managers = apply.apply({}, config, {}, M1, apply.FREE, ignored, force=False)
    assert managers == {M1: {p("metadata", "labels", "a")}}


# -- properties -----------------------------------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "d"])
_values = st.one_of(st.sampled_from(["1", "2", "x"]), st.integers(0, 3), st.booleans())
_env = st.lists(
    st.fixed_dictionaries({"name": _keys}, optional={"value": _values}),
    max_size=3,
    unique_by=lambda e: e["name"],
)
_container = st.fixed_dictionaries(
    {"name": _keys}, optional={"image": _values, "env": _env, "args": st.lists(_values, max_size=2)}
)
_containers = st.lists(_container, max_size=3, unique_by=lambda c: c["name"])
_objects = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(_keys, st.sampled_from(["1", "2"]), max_size=3),
                "finalizers": st.lists(st.sampled_from(["x/a", "x/b", "x/c"]), max_size=3, unique=True),
            },
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "replicas": st.integers(0, 3),
                "template": st.fixed_dictionaries(
                    {"spec": st.fixed_dictionaries({"containers": _containers})}
                ),
            },
        ),
    },
)


def _leaves(value: Any, structure: apply.Structure) -> dict[Path, Any]:
    """Each owned path of a value with what is there."""
    found: dict[Path, Any] = {}
    for path in apply.field_set(value, structure):
        node: Any = value
        for element in path:
            node = apply.node_at(node, element)
        found[path] = node
    return found


@settings(max_examples=150, deadline=None)
@given(_objects, _objects)
def test_applying_the_same_configuration_twice_changes_nothing(
    live: dict[str, Any], config: dict[str, Any]
) -> None:
    first, managers = apply.apply(live, config, {}, M1, BUILT_IN, NONE, force=True)
    second, again = apply.apply(first, config, managers, M1, BUILT_IN, NONE, force=False)
    assert second == first
    assert again == managers


@settings(max_examples=150, deadline=None)
@given(_objects, _objects)
def test_the_result_holds_every_applied_value_and_the_applier_owns_exactly_them(
    live: dict[str, Any], config: dict[str, Any]
) -> None:
    result, managers = apply.apply(live, config, {}, M1, BUILT_IN, NONE, force=True)
    applied = _leaves(config, BUILT_IN)
    assert managers.get(M1, frozenset()) == frozenset(applied)
    held = _leaves(result, BUILT_IN)
    for path, value in applied.items():
        if not isinstance(value, dict | list):
            assert held.get(path) == value, fieldsets.path_string(path)


@settings(max_examples=150, deadline=None)
@given(_objects)
def test_an_object_compared_with_itself_has_no_changes(value: dict[str, Any]) -> None:
    compared = apply.compare(value, copy.deepcopy(value), BUILT_IN)
    assert compared.added == set()
    assert compared.removed == set()
    assert compared.modified == set()
    assert apply.merge(value, value, BUILT_IN) == value


@settings(max_examples=150, deadline=None)
@given(_objects, _objects)
def test_what_one_manager_stops_applying_leaves_the_object_unless_another_owns_it(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    live, managers = apply.apply({}, first, {}, M1, BUILT_IN, NONE, force=True)
    after, owners = apply.apply(live, second, managers, M1, BUILT_IN, NONE, force=True)
    gone: FieldSet = frozenset(apply.field_set(first, BUILT_IN)) - frozenset(
        apply.field_set(second, BUILT_IN)
    )
    remaining = apply.field_set(after, BUILT_IN)
    for path in gone:
        if not any(path[: len(q)] == q for q in apply.field_set(second, BUILT_IN) if len(q) < len(path)):
            assert path not in remaining, fieldsets.path_string(path)
    assert owners.get(M1, frozenset()) == frozenset(apply.field_set(second, BUILT_IN))


def test_a_crd_schema_declares_associative_lists_sets_and_atomic_maps() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name", "protocol"],
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                },
            }
        },
    }
    structure = apply.CustomRoot(schema)
    config = {
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "tags": ["a"],
            "selector": {"app": "x"},
        },
        "metadata": {"finalizers": ["f/x"]},
    }
    port = fieldsets.key({"name": "http", "protocol": "TCP"})
    assert apply.field_set(config, structure) == {
        p("spec", "ports", port),
        p("spec", "ports", port, "name"),
        p("spec", "ports", port, "protocol"),
        p("spec", "ports", port, "port"),
        p("spec", "tags", fieldsets.value("a")),
        p("spec", "selector"),
        p("metadata", "finalizers", fieldsets.value("f/x")),
    }
    live = {"spec": {"ports": [{"name": "admin", "protocol": "TCP", "port": 9}], "tags": ["b"]}}
    merged = apply.merge(live, config, structure)
    assert [port["name"] for port in merged["spec"]["ports"]] == ["admin", "http"]
    assert merged["spec"]["tags"] == ["b", "a"]
