"""Label and field selectors: Kubernetes syntax and semantics, in the parser and in store lists."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capa_py.api import Cluster, Machine
from capa_py.store import FieldSelector, Invalid, LabelSelector, SQLiteStore

# -- a reference model of label selectors, written from the Kubernetes documentation -------------------

KEYS = ["app", "tier", "example.com/role", "in", "notin", "x_y.z"]
VALUES = ["web", "db", "v1.2", "a-b", "Z_9"]


@dataclass(frozen=True)
class Req:
    key: str
    op: str  # "eq", "ne", "in", "notin", "exists", "absent"
    values: tuple[str, ...]


def reference_matches(requirements: list[Req], labels: Mapping[str, str]) -> bool:
    """Kubernetes semantics: every requirement must hold; != and notin hold for absent labels."""
    for req in requirements:
        has = req.key in labels
        if req.op == "eq":
            ok = has and labels[req.key] == req.values[0]
        elif req.op == "ne":
            ok = not has or labels[req.key] != req.values[0]
        elif req.op == "in":
            ok = has and labels[req.key] in req.values
        elif req.op == "notin":
            ok = not has or labels[req.key] not in req.values
        elif req.op == "exists":
            ok = has
        else:
            ok = not has
        if not ok:
            return False
    return True


spaces = st.sampled_from(["", " ", "  "])


@st.composite
def requirement_text(draw: st.DrawFn) -> tuple[Req, str]:
    key = draw(st.sampled_from(KEYS))
    op = draw(st.sampled_from(["eq", "ne", "in", "notin", "exists", "absent"]))
    pad = [draw(spaces) for _ in range(4)]
    if op in ("eq", "ne"):
        value = draw(st.sampled_from(["", *VALUES]))
        symbol = draw(st.sampled_from(["=", "=="])) if op == "eq" else "!="
        return Req(key, op, (value,)), f"{pad[0]}{key}{pad[1]}{symbol}{pad[2]}{value}{pad[3]}"
    if op in ("in", "notin"):
        values = tuple(draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3)))
        inner = ",".join(f"{pad[2]}{v}" for v in values)
        return Req(key, op, values), f"{pad[0]}{key} {pad[1]}{op}{pad[1]}({inner}{pad[3]}){pad[0]}"
    if op == "exists":
        return Req(key, op, ()), f"{pad[0]}{key}{pad[1]}"
    return Req(key, op, ()), f"{pad[0]}!{pad[1]}{key}{pad[2]}"


selectors = st.lists(requirement_text(), min_size=0, max_size=4)
label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(["", *VALUES]), max_size=len(KEYS))


@given(selector=selectors, labels=label_sets)
def test_label_selector_matches_like_the_kubernetes_reference(
    selector: list[tuple[Req, str]], labels: dict[str, str]
) -> None:
    text = ",".join(part for _, part in selector)
    parsed = LabelSelector.parse(text)
    expected = reference_matches([req for req, _ in selector], labels)
    assert parsed.matches(labels) == expected, f"selector {text!r} on labels {labels}: expected {expected}"


@given(selector=selectors, labels=label_sets)
def test_label_selector_string_form_parses_back_to_the_same_selector(
    selector: list[tuple[Req, str]], labels: dict[str, str]
) -> None:
    parsed = LabelSelector.parse(",".join(part for _, part in selector))
    reparsed = LabelSelector.parse(str(parsed))
    assert reparsed == parsed, f"{str(parsed)!r} does not parse back to {parsed}"
    assert reparsed.matches(labels) == parsed.matches(labels)


@given(labels=label_sets)
def test_match_labels_selector_requires_every_pair(labels: dict[str, str]) -> None:
    wanted = {"app": "web", "tier": "db"}
    selector = LabelSelector.from_match_labels(wanted)
    assert selector.matches(labels) == all(labels.get(k) == v for k, v in wanted.items())


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "db"}, True),
        ("app!=web", {"app": "web"}, False),
        ("app in (web, db)", {"app": "db"}, True),
        ("app in (web, db)", {}, False),
        ("app notin (web)", {}, True),
        ("app notin (web)", {"app": "web"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("!app", {"tier": "x"}, True),
        ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "b"}, True),
        ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "b", "legacy": "1"}, False),
        ("", {"anything": "x"}, True),
    ],
)
def test_label_selector_examples(text: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected, f"{text!r} on {labels}"


@pytest.mark.parametrize(
    "text", ["app in ()", "app in", "=web", "app=web=db", "app web", "!app in (x)", "app=(x)", "a,,=b"]
)
def test_an_unparseable_label_selector_is_invalid(text: str) -> None:
    with pytest.raises(Invalid) as caught:
        LabelSelector.parse(text)
    assert caught.value.field == "labelSelector", f"{text!r}: Invalid must name labelSelector"


# -- field selectors -----------------------------------------------------------------------------------


DOCUMENT = {
    "metadata": {
        "name": "m-0",
        "namespace": "default",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "X", "name": "helper", "uid": "1"},
            {"apiVersion": "v1", "kind": "X", "name": "boss", "uid": "2", "controller": True},
        ],
    },
    "spec": {"paused": False, "replicas": 3, "nested": {"deep": "yes"}},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("metadata.name=m-0", True),
        (".metadata.name=m-0", True),
        ("metadata.name==m-0", True),
        ("metadata.name!=m-0", False),
        ("metadata.namespace=default,metadata.name=m-1", False),
        (".metadata.controller=boss", True),
        (".metadata.controller=helper", False),
        ("spec.paused=false", True),
        ("spec.replicas=3", True),
        ("spec.nested.deep=yes", True),
        ("spec.missing!=x", True),
        ("spec.missing=x", False),
    ],
)
def test_field_selector_examples(text: str, expected: bool) -> None:
    assert FieldSelector.parse(text).matches(DOCUMENT) is expected, f"{text!r}"


def test_controller_field_is_absent_without_a_controller_reference() -> None:
    document = {"metadata": {"ownerReferences": [{"name": "helper", "uid": "1"}]}}
    assert not FieldSelector.parse(".metadata.controller=helper").matches(document)
    assert FieldSelector.parse(".metadata.controller!=helper").matches(document)


@pytest.mark.parametrize("text", ["nonsense", "=x", "a b=c"])
def test_an_unparseable_field_selector_is_invalid(text: str) -> None:
    with pytest.raises(Invalid) as caught:
        FieldSelector.parse(text)
    assert caught.value.field == "fieldSelector"


# -- selectors in store lists --------------------------------------------------------------------------


@pytest.fixture
def labelled(store: SQLiteStore) -> SQLiteStore:
    for name, labels in {
        "a": {"app": "web", "tier": "front"},
        "b": {"app": "web", "tier": "back"},
        "c": {"app": "db"},
        "d": {},
    }.items():
        store.create(Cluster.model_validate({"metadata": {"name": name, "labels": labels}}))
    return store


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("tier in (front, back)", ["a", "b"]),
        ("tier notin (front)", ["b", "c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=web,!tier", []),
        (None, ["a", "b", "c", "d"]),
    ],
)
def test_list_filters_by_label_selector(
    labelled: SQLiteStore, selector: str | None, names: list[str]
) -> None:
    got = [c.name for c in labelled.list(Cluster, label_selector=selector)]
    assert got == names, f"list with {selector!r}"


def test_list_filters_by_field_selector(labelled: SQLiteStore) -> None:
    assert [c.name for c in labelled.list(Cluster, field_selector="metadata.name=c")] == ["c"]
    assert [c.name for c in labelled.list(Cluster, field_selector="metadata.name!=c")] == ["a", "b", "d"]


def test_list_filters_by_controller_field(store: SQLiteStore) -> None:
    boss = store.create(Cluster.model_validate({"metadata": {"name": "boss"}}))
    helper = store.create(Cluster.model_validate({"metadata": {"name": "helper"}}))
    for name, refs in {
        "controlled": [boss.owner_reference(controller=True)],
        "merely-owned": [boss.owner_reference(controller=False)],
        "other": [helper.owner_reference(controller=True)],
    }.items():
        machine = Machine.model_validate(
            {"metadata": {"name": name}, "spec": {"clusterName": "x", "infrastructureRef": {"name": name}}}
        )
        machine.metadata.owner_references = refs
        store.create(machine)

    got = [m.name for m in store.list(Machine, field_selector=".metadata.controller=boss")]
    assert got == ["controlled"], "only the object whose controller reference names boss must match"


def test_list_with_a_bad_selector_raises_invalid(store: SQLiteStore) -> None:
    with pytest.raises(Invalid, match="labelSelector"):
        store.list(Cluster, label_selector="app in ()")
    with pytest.raises(Invalid, match="fieldSelector"):
        store.list(Cluster, field_selector="nonsense")
