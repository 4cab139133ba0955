"""State getters read what an action needs from a real store, declared with the CtrlKit selectors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api import CLUSTER_NAME_LABEL, AWSCluster, Cluster, KindRegistry, KubeObject, Machine
from capa_py.ctrlkit import (
    Context,
    NotOwned,
    Result,
    Selector,
    StateError,
    StatefulAction,
    StateSpec,
    fetch_state,
)
from capa_py.ctrlkit.state import interpolate
from capa_py.store import SQLiteStore


def spec(name: str, kind: type[KubeObject], is_list: bool, *selectors: str) -> StateSpec:
    return StateSpec(name, kind, is_list, tuple(Selector.parse(s) for s in selectors))


def names(objects: list[KubeObject]) -> list[str]:
    return [o.name for o in objects]


def new_machine(
    name: str,
    namespace: str = "default",
    owners: tuple[KubeObject, ...] = (),
    controller: bool = True,
    **labels: str,
) -> Machine:
    machine = Machine.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"clusterName": "demo", "infrastructureRef": {"kind": "AWSMachine", "name": name}},
        }
    )
    machine.metadata.owner_references = [owner.owner_reference(controller=controller) for owner in owners]
    return machine


@pytest.fixture
def target(store: SQLiteStore) -> Cluster:
    return store.create(
        Cluster.model_validate(
            {
                "metadata": {"name": "demo", "labels": {"team": "blue"}},
                "spec": {"infrastructureRef": {"kind": "AWSCluster", "name": "demo-infra"}},
            }
        )
    )


@pytest.fixture
def other(store: SQLiteStore) -> Cluster:
    return store.create(Cluster.model_validate({"metadata": {"name": "other"}}))


# -- selectors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("name=${target.Name}", Selector("name", "", "${target.Name}")),
        (
            "labels/cluster.x-k8s.io/cluster-name=demo",
            Selector("labels", "cluster.x-k8s.io/cluster-name", "demo"),
        ),
        (
            "fields/.metadata.controller=${target.Name}",
            Selector("fields", ".metadata.controller", "${target.Name}"),
        ),
        ("  owned  ", Selector("owned")),
    ],
)
def test_selectors_parse_and_print_back(text: str, parsed: Selector) -> None:
    assert Selector.parse(text) == parsed
    assert Selector.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["name", "labels=x", "labels/=x", "annotations/a=b", "owned=yes"])
def test_a_bad_selector_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="selector"):
        Selector.parse(text)


# -- interpolation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("${target.Name}", "demo"),
        ("${target.name}", "demo"),
        ("${target.Namespace}", "default"),
        ("${target.metadata.name}", "demo"),
        ("${target.metadata.labels.team}", "blue"),
        ("${target.spec.infrastructureRef.name}", "demo-infra"),
        ("${target.Spec.InfrastructureRef.Name}", "demo-infra"),
        ("${target.Labels.team}", "blue"),
        ("${target.APIVersion}", "cluster.x-k8s.io/v1beta1"),
        ("${target.Spec.ControlPlaneEndpoint.Port}", "0"),
        ("prefix-${target.Name}-${target.metadata.labels.team}", "prefix-demo-blue"),
        ("no references", "no references"),
    ],
)
def test_references_to_the_target_are_interpolated(target: Cluster, text: str, value: str) -> None:
    assert interpolate(target, text) == value


def test_go_initialisms_resolve_to_their_fields(target: Cluster) -> None:
    assert interpolate(target, "${target.UID}") == target.metadata.uid
    assert interpolate(target, "${target.ResourceVersion}") == target.metadata.resource_version


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${target.Nope}", "has no 'Nope'"),
        ("${target.metadata.labels.missing}", "has no 'missing'"),
        ("${cluster.Name}", "must start with 'target.'"),
        ("${target.spec.controlPlaneRef}", "is not set"),
    ],
)
def test_a_bad_reference_is_a_state_error(target: Cluster, text: str, message: str) -> None:
    with pytest.raises(StateError, match=message):
        interpolate(target, text)


# -- single objects ------------------------------------------------------------------------------------


def test_name_selector_gets_one_object_in_the_targets_namespace(store: SQLiteStore, target: Cluster) -> None:
    infra = AWSCluster.model_validate(
        {
            "metadata": {"name": "demo"},
            "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
        }
    )
    store.create(infra)
    elsewhere = infra.model_copy(deep=True)
    elsewhere.metadata.namespace = "elsewhere"
    elsewhere.metadata.name = "missing-here"
    store.create(elsewhere)

    found = fetch_state(store, target, spec("infra", AWSCluster, False, "name=${target.Name}"))
    absent = fetch_state(store, target, spec("infra", AWSCluster, False, "name=missing-here"))

    assert isinstance(found, AWSCluster)
    assert found.name == "demo"
    assert absent is None, "a missing single object is None, and other namespaces are not searched"


def test_owned_single_object_owned_by_the_target_is_returned(store: SQLiteStore, target: Cluster) -> None:
    store.create(new_machine("demo", owners=(target,)))
    found = fetch_state(store, target, spec("machine", Machine, False, "name=${target.Name}", "owned"))
    assert found is not None
    assert found.name == "demo"


def test_owned_single_object_not_owned_raises_not_owned(
    store: SQLiteStore, target: Cluster, other: Cluster
) -> None:
    store.create(new_machine("demo", owners=(other,)))
    with pytest.raises(NotOwned, match="is not owned by Cluster default/demo"):
        fetch_state(store, target, spec("machine", Machine, False, "name=${target.Name}", "owned"))


def test_ownership_is_by_uid_not_by_name(store: SQLiteStore, target: Cluster) -> None:
    previous_incarnation = target.model_copy(deep=True)
    previous_incarnation.metadata.uid = "an-older-uid"
    machine = new_machine("demo", owners=(previous_incarnation,))
    # Its owner is absent, so the store's garbage collection deletes it: a finalizer keeps it (marked).
    machine.metadata.finalizers = ["test.capa.io/hold"]
    store.create(machine)
    with pytest.raises(NotOwned):
        fetch_state(store, target, spec("machine", Machine, False, "name=demo", "owned"))


def test_a_single_state_that_selects_several_objects_is_an_error(store: SQLiteStore, target: Cluster) -> None:
    store.create(new_machine("m-0", **{CLUSTER_NAME_LABEL: "demo"}))
    store.create(new_machine("m-1", **{CLUSTER_NAME_LABEL: "demo"}))
    with pytest.raises(StateError, match="selects 2 Machine objects"):
        fetch_state(
            store, target, spec("machine", Machine, False, f"labels/{CLUSTER_NAME_LABEL}=${{target.Name}}")
        )


def test_a_single_state_by_label_returns_the_only_match_or_none(store: SQLiteStore, target: Cluster) -> None:
    state = spec("machine", Machine, False, "labels/role=${target.metadata.labels.team}")
    assert fetch_state(store, target, state) is None
    store.create(new_machine("m-0", role="blue"))
    found = fetch_state(store, target, state)
    assert found is not None
    assert found.name == "m-0"


# -- lists ---------------------------------------------------------------------------------------------


@pytest.fixture
def machines(store: SQLiteStore, target: Cluster, other: Cluster) -> None:
    store.create(new_machine("mine-0", owners=(target,), **{CLUSTER_NAME_LABEL: "demo"}))
    store.create(new_machine("mine-1", owners=(target,), **{CLUSTER_NAME_LABEL: "demo"}))
    store.create(new_machine("labelled-not-owned", owners=(other,), **{CLUSTER_NAME_LABEL: "demo"}))
    store.create(new_machine("owned-not-controlled", owners=(target,), controller=False))
    store.create(new_machine("unrelated", owners=(other,), **{CLUSTER_NAME_LABEL: "other"}))
    store.create(new_machine("other-namespace", namespace="elsewhere", **{CLUSTER_NAME_LABEL: "demo"}))


@pytest.mark.usefixtures("machines")
def test_labels_selector_lists_in_the_targets_namespace(store: SQLiteStore, target: Cluster) -> None:
    state = spec("machines", Machine, True, f"labels/{CLUSTER_NAME_LABEL}=${{target.Name}}")
    assert names(fetch_state(store, target, state)) == ["labelled-not-owned", "mine-0", "mine-1"]


@pytest.mark.usefixtures("machines")
def test_labels_selector_with_a_label_reference(store: SQLiteStore, target: Cluster) -> None:
    store.create(new_machine("team-blue", team="blue"))
    state = spec("machines", Machine, True, "labels/team=${target.metadata.labels.team}")
    assert names(fetch_state(store, target, state)) == ["team-blue"]


@pytest.mark.usefixtures("machines")
def test_owned_leaves_out_objects_the_target_does_not_own(store: SQLiteStore, target: Cluster) -> None:
    state = spec("machines", Machine, True, f"labels/{CLUSTER_NAME_LABEL}=${{target.Name}}", "owned")
    assert names(fetch_state(store, target, state)) == ["mine-0", "mine-1"]


@pytest.mark.usefixtures("machines")
def test_owned_alone_lists_everything_the_target_owns(store: SQLiteStore, target: Cluster) -> None:
    state = spec("machines", Machine, True, "owned")
    assert names(fetch_state(store, target, state)) == ["mine-0", "mine-1", "owned-not-controlled"]


@pytest.mark.usefixtures("machines")
def test_controller_field_selector_lists_what_the_target_controls(
    store: SQLiteStore, target: Cluster
) -> None:
    state = spec("machines", Machine, True, "fields/.metadata.controller=${target.Name}")
    assert names(fetch_state(store, target, state)) == ["mine-0", "mine-1"], (
        "only objects whose controller reference names the target (not mere owners) must match"
    )


@pytest.mark.usefixtures("machines")
def test_fields_and_labels_combine(store: SQLiteStore, target: Cluster) -> None:
    state = spec(
        "machines",
        Machine,
        True,
        f"labels/{CLUSTER_NAME_LABEL}=demo",
        "fields/metadata.name=mine-1",
    )
    assert names(fetch_state(store, target, state)) == ["mine-1"]


@pytest.mark.usefixtures("machines")
def test_name_selector_on_a_list_state_filters_by_name(store: SQLiteStore, target: Cluster) -> None:
    state = spec("machines", Machine, True, "name=mine-0", "owned")
    assert names(fetch_state(store, target, state)) == ["mine-0"]


# -- schemaless kinds ----------------------------------------------------------------------------------


@pytest.fixture
def widget_store(tmp_path: Path) -> Iterator[tuple[SQLiteStore, type[KubeObject], type[KubeObject]]]:
    registry = KindRegistry()
    app = registry.define("example.com/v1", "App")
    widget = registry.define("example.com/v1", "Widget")
    with SQLiteStore(tmp_path / "widgets.db", registry=registry) as store:
        yield store, app, widget


def test_state_getters_work_with_schemaless_kinds(
    widget_store: tuple[SQLiteStore, type[KubeObject], type[KubeObject]],
) -> None:
    store, app_kind, widget_kind = widget_store
    app = store.create(app_kind.model_validate({"metadata": {"name": "shop"}, "spec": {"size": 2}}))
    stranger = store.create(app_kind.model_validate({"metadata": {"name": "stranger"}}))
    for name, owner in (("shop-a", app), ("shop-b", app), ("foreign", stranger)):
        widget = widget_kind.model_validate({"metadata": {"name": name, "labels": {"app": "shop"}}})
        widget.metadata.owner_references = [owner.owner_reference()]
        store.create(widget)

    state = spec("widgets", widget_kind, True, "labels/app=${target.Name}", "owned")

    assert names(fetch_state(store, app, state)) == ["shop-a", "shop-b"]
    assert interpolate(app, "${target.spec.size}") == "2", "free-form spec fields can be referenced"


# -- with actions --------------------------------------------------------------------------------------


def test_a_stateful_action_with_a_not_owned_state_requeues_without_acting(
    store: SQLiteStore, target: Cluster, other: Cluster
) -> None:
    store.create(new_machine("demo", owners=(other,)))
    acted: list[str] = []
    state = spec("machine", Machine, False, "name=${target.Name}", "owned")
    leaf = StatefulAction(
        "adopt-machine",
        {"machine": lambda: fetch_state(store, target, state)},
        lambda ctx, states: acted.append(states["machine"].name) or Result(),
    )

    result = leaf.run(Context())

    assert isinstance(result.error, NotOwned), f"expected a NotOwned error, got {result}"
    assert acted == []
