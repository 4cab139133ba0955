"""The SQLite store's indexes: lists through them return what filtering every object returns, every write path
keeps them right in its own transaction, a file written before they existed is indexed when opened, and the
owner-uid field selector works on every store."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capa_py.api import Cluster, Machine
from capa_py.api.core import Event, Namespace
from capa_py.store import FieldSelector, LabelSelector, SQLiteStore
from capa_py.store.protocol import ObjectStore
from capa_py.store.selectors import field_value
from capa_py.store.sqlite_index import INDEXED_FIELDS, plan_list
from tests.store.test_store_selectors import KEYS, VALUES, Req, requirement_text

NAMESPACES = ("ns-a", "ns-b")

# -- helpers -------------------------------------------------------------------------------------------


def cluster(name: str, namespace: str = "default", labels: dict[str, str] | None = None) -> Cluster:
    return Cluster.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}
    )


def machine(name: str, namespace: str = "default") -> Machine:
    return Machine.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterName": "x", "infrastructureRef": {"name": name}},
        }
    )


IndexRows = tuple[set[tuple[str, ...]], set[tuple[str, ...]], set[tuple[str, ...]]]


def read_rows(path: Path) -> tuple[IndexRows, IndexRows]:
    """The index tables as stored, and as they should be for the stored objects (computed here from each
    document, independently of the store's indexing code)."""
    conn = sqlite3.connect(path)
    try:
        labels = set(conn.execute("SELECT api_version, kind, namespace, name, key, value FROM labels"))
        fields = set(conn.execute("SELECT api_version, kind, namespace, name, field, value FROM field_index"))
        owners = set(conn.execute("SELECT owner_uid, dependent_uid FROM owner_index"))
        docs = [json.loads(text) for (text,) in conn.execute("SELECT doc FROM objects")]
    finally:
        conn.close()
    want_labels: set[tuple[str, ...]] = set()
    want_fields: set[tuple[str, ...]] = set()
    want_owners: set[tuple[str, ...]] = set()
    for doc in docs:
        meta = doc["metadata"]
        identity = (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])
        want_labels |= {(*identity, k, v) for k, v in (meta.get("labels") or {}).items()}
        for path_ in INDEXED_FIELDS:
            value = field_value(doc, path_)
            if value is not None:
                want_fields.add((*identity, path_, value))
        want_owners |= {(ref["uid"], meta["uid"]) for ref in meta.get("ownerReferences", [])}
    return (labels, fields, owners), (want_labels, want_fields, want_owners)


def assert_index_matches_objects(path: Path, step: str) -> None:
    actual, expected = read_rows(path)
    for table, got, want in zip(("labels", "field_index", "owner_index"), actual, expected, strict=True):
        assert got == want, (
            f"after {step}: {table} has {sorted(got - want)} extra, misses {sorted(want - got)}"
        )


def names(found: list[Cluster]) -> list[str]:
    return [f"{c.metadata.namespace}/{c.name}" for c in found]


# -- lists through the index give what filtering every object gives --------------------------------------


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteStore, list[Cluster]]]:
    """120 Clusters in two namespaces with labels drawn from the selector tests' keys and values, a few
    owned by the first (one as controller), read back in full for the reference."""
    rng = random.Random(9)
    with SQLiteStore(tmp_path_factory.mktemp("index") / "state.db") as store:
        first = store.create(cluster("c-000", NAMESPACES[0], {"app": "web"}))
        for index in range(1, 120):
            labels = {key: rng.choice(["", *VALUES]) for key in rng.sample(KEYS, rng.randint(0, len(KEYS)))}
            obj = cluster(f"c-{index:03d}", NAMESPACES[index % 2], labels)
            if index % 10 == 0:
                obj.metadata.owner_references = [first.owner_reference(controller=index % 20 == 0)]
            store.create(obj)
        everything = list(store.list(Cluster))
        assert len(everything) == 120
        yield store, everything


FIELD_SELECTORS = [
    None,
    "metadata.name=c-005",
    "metadata.name!=c-005",
    "metadata.namespace=ns-a",
    "metadata.namespace!=ns-a",
    ".metadata.controller=c-000",
    "metadata.controller!=c-000",
    "OWNER",
    "OWNER_NOT",
    "spec.paused!=true",
    "metadata.name=c-010,metadata.controller=c-000",
]


@settings(max_examples=300, deadline=None)
@given(
    selector=st.lists(requirement_text(), min_size=0, max_size=4),
    namespace=st.sampled_from([None, *NAMESPACES, "elsewhere"]),
    field=st.sampled_from(FIELD_SELECTORS),
)
def test_indexed_list_returns_what_filtering_every_object_returns(
    population: tuple[SQLiteStore, list[Cluster]],
    selector: list[tuple[Req, str]],
    namespace: str | None,
    field: str | None,
) -> None:
    store, everything = population
    owner_uid = everything[0].metadata.uid
    if field == "OWNER":
        field = f"metadata.ownerReferences.uid={owner_uid}"
    elif field == "OWNER_NOT":
        field = f"metadata.ownerReferences.uid!={owner_uid}"
    text = ",".join(part for _, part in selector)
    labels, fields = LabelSelector.parse(text), FieldSelector.parse(field)
    expected = [
        c
        for c in everything
        if (namespace is None or c.metadata.namespace == namespace)
        and labels.matches(c.metadata.labels)
        and fields.matches(c.to_dict())
    ]
    got = store.list(Cluster, namespace, label_selector=text, field_selector=field)
    assert names(got) == names(expected), f"labels {text!r}, fields {field!r}, namespace {namespace!r}"
    assert [c.to_dict() for c in got] == [c.to_dict() for c in expected]


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteStore, list[Event]]]:
    """60 Events whose involved objects have some, all or none of kind, name and uid set."""
    rng = random.Random(4)
    with SQLiteStore(tmp_path_factory.mktemp("events") / "state.db") as store:
        for index in range(60):
            involved = {
                field: rng.choice(options)
                for field, options in (
                    ("kind", ["Cluster", "Machine"]),
                    ("name", ["a", "b", "c"]),
                    ("uid", ["1", "2"]),
                )
                if rng.random() < 0.8
            }
            store.create(
                Event.model_validate(
                    {
                        "metadata": {"name": f"e-{index:02d}", "namespace": NAMESPACES[index % 2]},
                        "involvedObject": involved,
                    }
                )
            )
        yield store, list(store.list(Event))


event_fields = st.lists(
    st.tuples(
        st.sampled_from(["involvedObject.kind", ".involvedObject.name", "involvedObject.uid", "type"]),
        st.sampled_from(["=", "==", "!="]),
        st.sampled_from(["Cluster", "Machine", "a", "b", "1", "2", "x"]),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(requirements=event_fields, namespace=st.sampled_from([None, *NAMESPACES]))
def test_event_lists_by_involved_object_return_what_the_matcher_returns(
    events: tuple[SQLiteStore, list[Event]], requirements: list[tuple[str, str, str]], namespace: str | None
) -> None:
    store, everything = events
    text = ",".join(f"{path}{op}{value}" for path, op, value in requirements)
    fields = FieldSelector.parse(text)
    expected = [
        e.name
        for e in everything
        if (namespace is None or e.metadata.namespace == namespace) and fields.matches(e.to_dict())
    ]
    got = [e.name for e in store.list(Event, namespace, field_selector=text)]
    assert got == expected, f"fields {text!r}, namespace {namespace!r}"


def test_cluster_scoped_kinds_list_by_namespace_field_like_the_matcher(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        store.create(Namespace.model_validate({"metadata": {"name": "team", "labels": {"app": "web"}}}))
        assert [n.name for n in store.list(Namespace, field_selector="metadata.namespace=team")] == []
        assert [n.name for n in store.list(Namespace, field_selector="metadata.namespace!=team")] == ["team"]
        assert [n.name for n in store.list(Namespace, "ignored", label_selector="app=web")] == ["team"]


def _plan_of(path: Path, kind: type[Cluster] | type[Event], labels: str | None, fields: str | None) -> str:
    plan = plan_list(kind, "default", LabelSelector.parse(labels), FieldSelector.parse(fields))
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.params).fetchall()
    finally:
        conn.close()
    return "\n".join(str(row[3]) for row in rows)


@pytest.mark.parametrize(
    ("kind", "labels", "fields", "index"),
    [
        (Cluster, "cluster.x-k8s.io/cluster-name=a", None, "labels_by_value"),
        (Cluster, "app in (web, db),!legacy", None, "labels_by_value"),
        (Cluster, None, "metadata.ownerReferences.uid=u-1", "owner_index"),
        (Cluster, None, ".metadata.controller=boss", "field_index_by_value"),
        (Event, None, "involvedObject.name=a,involvedObject.kind=Cluster", "field_index_by_value"),
    ],
)
def test_selector_lists_find_rows_through_an_index_not_a_pass_over_the_kind(
    store_path: Path, kind: type[Cluster] | type[Event], labels: str | None, fields: str | None, index: str
) -> None:
    SQLiteStore(store_path).close()
    plan = _plan_of(store_path, kind, labels, fields)
    assert index in plan, f"the list should use {index}:\n{plan}"
    # The objects are then read by their full primary key, one lookup per selected row.
    assert "SEARCH o USING INDEX" in plan, plan
    assert "namespace=? AND name=?" in plan, plan
    assert "SCAN" not in plan, f"a selector list must not scan:\n{plan}"


def test_a_name_field_selector_reads_one_row_by_primary_key(store_path: Path) -> None:
    SQLiteStore(store_path).close()
    plan = _plan_of(store_path, Cluster, None, "metadata.name=a")
    assert plan.startswith("SEARCH o USING INDEX"), plan
    assert "name=?" in plan, plan
    assert "SCAN" not in plan, plan


def test_a_selector_list_validates_only_the_objects_it_returns(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteStore(store_path) as store:
        for index in range(50):
            store.create(cluster(f"c-{index}", labels={"group": str(index % 10)}))
        validated: list[str] = []
        original = Cluster.model_validate_json.__func__  # type: ignore[attr-defined]

        def counting(cls: type[Cluster], /, text: str | bytes, **kwargs: object) -> Cluster:
            validated.append(str(text))
            return original(cls, text, **kwargs)  # type: ignore[no-any-return]

        monkeypatch.setattr(Cluster, "model_validate_json", classmethod(counting))
        found = store.list(Cluster, "default", label_selector="group=3")
    assert sorted(c.name for c in found) == ["c-13", "c-23", "c-3", "c-33", "c-43"]
    assert len(validated) == 5, f"only the 5 matches should be parsed, not {len(validated)} objects"


def _vm_steps(store: SQLiteStore, selector: str) -> int:
    """SQLite virtual-machine steps one list takes: the work of its query, independent of the clock."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    with store._lease() as conn:  # the list, in this thread, runs on the connection held here
        conn.set_progress_handler(tick, 1)
        try:
            store.list(Cluster, "default", label_selector=selector)
        finally:
            conn.set_progress_handler(None, 1)
    return steps[0]


def test_the_requirement_with_the_fewest_rows_drives_a_selector_list(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        for index in range(400):
            store.create(
                cluster(f"c-{index}", labels={"all": "yes", "id": str(index), "odd": str(index % 2)})
            )
        alone = _vm_steps(store, "id=7")
        everything = _vm_steps(store, "all=yes")
        assert everything > 20 * alone, f"the measure must tell 1 row from 400 ({everything} vs {alone})"
        for selector in ("all=yes,id=7", "id=7,all=yes", "all,odd=1,id=7", "all=yes,id=7,odd!=0"):
            steps = _vm_steps(store, selector)
            assert steps < everything / 5, (
                f"{selector}: {steps} steps, as if driven by a broad requirement (all=yes: {everything})"
            )
            assert [c.name for c in store.list(Cluster, label_selector=selector)] == ["c-7"]


# -- every write path keeps the index right -------------------------------------------------------------


def test_every_write_path_keeps_the_indexes_equal_to_the_objects(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        owner = store.create(cluster("owner", labels={"app": "web", "tier": "front"}))
        other = store.create(cluster("other", labels={"app": "db"}))
        assert_index_matches_objects(store_path, "create")

        dependent = machine("dep")
        dependent.metadata.labels = {"app": "web"}
        dependent.metadata.owner_references = [owner.owner_reference(controller=True)]
        dependent = store.create(dependent)
        shared = machine("shared")
        shared.metadata.owner_references = [owner.owner_reference(False), other.owner_reference(False)]
        store.create(shared)
        orphaned = machine("orphaned")
        orphaned.metadata.owner_references = [other.owner_reference(controller=True)]
        store.create(orphaned)
        assert_index_matches_objects(store_path, "creating dependents")

        owner.metadata.labels = {"app": "api", "new": "x"}  # change one, drop one, add one
        owner.metadata.finalizers = ["example.com/hold"]
        owner = store.update(owner)
        assert_index_matches_objects(store_path, "update of labels")
        assert names(store.list(Cluster, label_selector="app=api")) == ["default/owner"]
        assert store.list(Cluster, label_selector="tier") == []

        owner.status.phase = "Provisioned"
        owner = store.update_status(owner)
        assert_index_matches_objects(store_path, "status write")

        dependent.metadata.owner_references = [owner.owner_reference(False), other.owner_reference(True)]
        store.update(dependent)
        assert_index_matches_objects(store_path, "update of owner references")
        assert [m.name for m in store.list(Machine, field_selector=".metadata.controller=other")] == [
            "dep",
            "orphaned",
        ]

        store.delete(Cluster, "owner")
        assert_index_matches_objects(store_path, "deletion mark (finalizer held)")
        assert names(store.list(Cluster, label_selector="app=api")) == ["default/owner"]

        owner = store.get(Cluster, "owner")
        owner.metadata.finalizers = []
        store.update(owner)
        assert_index_matches_objects(store_path, "finalizer removal, and the owner's garbage collection")
        assert store.list(Cluster, label_selector="app=api") == []
        # Both machines had another owner left: they stay, without the removed owner's reference.
        assert {m.name for m in store.list(Machine)} == {"dep", "shared", "orphaned"}
        assert store.list(Machine, field_selector=f"metadata.ownerReferences.uid={owner.metadata.uid}") == []

        store.delete(Cluster, "other", propagation="Orphan")
        assert_index_matches_objects(store_path, "orphan deletion")
        assert {m.name for m in store.list(Machine)} == {"dep", "shared", "orphaned"}
        assert store.list(Machine, field_selector=".metadata.controller=other") == []

        store.delete(Machine, "dep")
        assert_index_matches_objects(store_path, "plain delete")
        assert store.list(Machine, label_selector="app=web") == []


def test_garbage_collection_removes_the_index_rows_of_the_dependents_it_deletes(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        owner = store.create(cluster("owner"))
        for index in range(3):
            obj = machine(f"m-{index}")
            obj.metadata.labels = {"cluster": "owner"}
            obj.metadata.owner_references = [owner.owner_reference(controller=True)]
            store.create(obj)
        uid_selector = f"metadata.ownerReferences.uid={owner.metadata.uid}"
        assert len(store.list(Machine, field_selector=uid_selector)) == 3
        store.delete(Cluster, "owner")
        assert_index_matches_objects(store_path, "cascading delete")
        assert store.list(Machine, label_selector="cluster=owner") == []
        assert store.list(Machine, field_selector=uid_selector) == []


def test_a_failed_write_leaves_the_index_as_it_was(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        created = store.create(cluster("a", labels={"app": "web"}))
        stale = created.model_copy(deep=True)
        created.metadata.labels = {"app": "db"}
        store.update(created)
        stale.metadata.labels = {"app": "stale"}
        with pytest.raises(Exception, match="modified"):
            store.update(stale)
        assert_index_matches_objects(store_path, "a conflicting update")
        assert store.list(Cluster, label_selector="app=stale") == []
        assert [c.name for c in store.list(Cluster, label_selector="app=db")] == ["a"]


def test_event_lookups_by_involved_object_use_the_field_index(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        for index, target in enumerate(["a", "b", "a"]):
            store.create(
                Event.model_validate(
                    {
                        "metadata": {"name": f"e-{index}", "namespace": "default"},
                        "involvedObject": {"kind": "Cluster", "name": target, "uid": f"uid-{target}"},
                    }
                )
            )
        assert_index_matches_objects(store_path, "event creates")
        found = store.list(
            Event, "default", field_selector="involvedObject.name=a,involvedObject.kind=Cluster"
        )
        assert [e.name for e in found] == ["e-0", "e-2"]
        assert [e.name for e in store.list(Event, field_selector="involvedObject.uid!=uid-a")] == ["e-1"]


def test_a_write_by_another_program_to_the_objects_table_keeps_the_index(store_path: Path) -> None:
    """The index follows the objects table itself, so a writer that knows nothing of it (an older capa-py
    sharing the file) cannot leave it stale."""
    with SQLiteStore(store_path) as store:
        store.create(cluster("a", labels={"app": "web"}))
        store.create(cluster("b", labels={"app": "web"}))
        conn = sqlite3.connect(store_path)
        try:
            conn.execute(
                "UPDATE objects SET doc = json_set(doc, '$.metadata.labels.app', 'raw') WHERE name='a'"
            )
            conn.execute("DELETE FROM objects WHERE name='b'")
            conn.commit()
        finally:
            conn.close()
        assert_index_matches_objects(store_path, "writes by another program")
        assert [c.name for c in store.list(Cluster, label_selector="app=raw")] == ["a"]
        assert store.list(Cluster, label_selector="app=web") == []


def test_the_first_controller_reference_is_the_indexed_controller(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        first = store.create(cluster("first"))
        second = store.create(cluster("second"))
        obj = machine("m")
        obj.metadata.owner_references = [
            second.owner_reference(controller=False),
            first.owner_reference(controller=True),
            second.owner_reference(controller=True),
        ]
        store.create(obj)
        assert_index_matches_objects(store_path, "two controller references")
        assert [m.name for m in store.list(Machine, field_selector="metadata.controller=first")] == ["m"]
        assert store.list(Machine, field_selector="metadata.controller=second") == []


# -- a file written before the index ------------------------------------------------------------------


def _strip_index(path: Path) -> None:
    """Make the file what a store without the index left: no triggers, no labels, field or layout tables,
    and (older still) an empty owner index."""
    conn = sqlite3.connect(path)
    try:
        for (trigger,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE labels")
        conn.execute("DROP TABLE field_index")
        conn.execute("DROP TABLE index_layout")
        conn.execute("DELETE FROM owner_index")
        conn.commit()
    finally:
        conn.close()


def test_a_file_written_before_the_index_is_indexed_when_opened(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        owner = store.create(cluster("owner", labels={"app": "web"}))
        child = machine("child")
        child.metadata.labels = {"app": "web"}
        child.metadata.owner_references = [owner.owner_reference(controller=True)]
        store.create(child)
        store.create(cluster("plain"))
    _strip_index(store_path)
    with SQLiteStore(store_path) as reopened:
        assert_index_matches_objects(store_path, "opening a file without the index")
        assert [c.name for c in reopened.list(Cluster, label_selector="app=web")] == ["owner"]
        assert [m.name for m in reopened.list(Machine, field_selector=".metadata.controller=owner")] == [
            "child"
        ]
        # Garbage collection reads the rebuilt owner index: the child goes with its owner.
        reopened.delete(Cluster, "owner")
        assert reopened.list(Machine) == []
        assert_index_matches_objects(store_path, "deleting after the rebuild")


def test_a_file_indexed_by_another_layout_is_indexed_again(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        store.create(cluster("a", labels={"app": "web"}))
    conn = sqlite3.connect(store_path)
    try:
        conn.execute("UPDATE index_layout SET version='0'")
        conn.execute("DELETE FROM labels")
        conn.execute(
            "INSERT INTO labels VALUES (?,?,?,?,?,?)",
            (Cluster.API_VERSION, "Cluster", "default", "ghost", "a", "b"),
        )
        conn.commit()
    finally:
        conn.close()
    with SQLiteStore(store_path) as reopened:
        assert_index_matches_objects(store_path, "opening a file with an older index layout")
        assert [c.name for c in reopened.list(Cluster, label_selector="app=web")] == ["a"]


def test_opening_an_indexed_file_again_does_not_rebuild(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        store.create(cluster("a", labels={"app": "web"}))
    conn = sqlite3.connect(store_path)
    try:
        # A row no object has: a rebuild would drop it, so its survival shows the index was left alone.
        conn.execute(
            "INSERT INTO labels VALUES (?,?,?,?,?,?)",
            (Cluster.API_VERSION, "Cluster", "default", "ghost", "a", "b"),
        )
        conn.commit()
    finally:
        conn.close()
    SQLiteStore(store_path).close()
    actual, _ = read_rows(store_path)
    assert (Cluster.API_VERSION, "Cluster", "default", "ghost", "a", "b") in actual[0]


# -- objects handed out are the caller's own ---------------------------------------------------------


def test_returned_objects_are_independent_of_the_store_and_of_each_other(store_path: Path) -> None:
    with SQLiteStore(store_path) as store:
        store.create(cluster("a", labels={"app": "web"}))
        first = store.get(Cluster, "a")
        first.metadata.labels["app"] = "changed"
        first.spec.paused = True
        listed = store.list(Cluster, label_selector="app=web")[0]
        listed.metadata.labels.clear()
        again = store.get(Cluster, "a")
        assert again.metadata.labels == {"app": "web"}, "a caller's change leaked into the store"
        assert not again.spec.paused, "a caller's change leaked into the store"
        assert store.list(Cluster, label_selector="app=web")[0].metadata.labels == {"app": "web"}


# -- the owner-uid field selector, on every store --------------------------------------------------------


def test_owner_uid_field_selector_lists_an_owners_dependents(store: ObjectStore) -> None:
    boss = store.create(cluster("boss"))
    helper = store.create(cluster("helper"))
    for name, refs in {
        "controlled": [boss.owner_reference(controller=True)],
        "co-owned": [helper.owner_reference(controller=True), boss.owner_reference(controller=False)],
        "other": [helper.owner_reference(controller=True)],
        "free": [],
    }.items():
        obj = machine(name)
        obj.metadata.owner_references = refs
        store.create(obj)

    owned = store.list(Machine, "default", field_selector=f"metadata.ownerReferences.uid={boss.metadata.uid}")
    assert [m.name for m in owned] == ["co-owned", "controlled"]
    not_owned = store.list(Machine, field_selector=f".metadata.ownerReferences.uid!={boss.metadata.uid}")
    assert [m.name for m in not_owned] == ["free", "other"]
    by_uid = store.list(Cluster, field_selector=f"metadata.uid={helper.metadata.uid}")
    assert [c.name for c in by_uid] == ["helper"]
