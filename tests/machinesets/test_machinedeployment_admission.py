"""What the embedded core's admission does to MachineDeployments and MachineSets, as Cluster API's webhooks:
defaults, and refusals naming the field; and the order a scale-down deletes Machines in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.cluster import CLUSTER_NAME_LABEL, Machine
from capa_py.api.conditions import READY, set_condition
from capa_py.api.machinesets import (
    DELETE_MACHINE_ANNOTATION,
    DEPLOYMENT_NAME_LABEL,
    MachineDeployment,
    scaled_value,
)
from capa_py.store.errors import Invalid
from capa_py.store.sqlite import SQLiteStore
from controllers.machinesets import deletion_order
from tests.machinesets.world import NS, deployment


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def test_a_deployment_is_defaulted_as_cluster_apis_webhook_defaults_it(store: SQLiteStore) -> None:
    md = deployment(replicas=None, version="1.30.1")
    md.spec.selector.match_labels.clear()
    md.spec.template.metadata.labels.clear()
    created = store.create(md)
    spec = created.spec
    assert spec.replicas == 1
    assert spec.revision_history_limit == 1
    assert spec.progress_deadline_seconds == 600
    assert spec.min_ready_seconds == 0
    assert spec.strategy is not None
    assert spec.strategy.type == "RollingUpdate"
    assert spec.strategy.rolling_update is not None
    assert (spec.strategy.rolling_update.max_surge, spec.strategy.rolling_update.max_unavailable) == (1, 0)
    assert spec.selector.match_labels == {DEPLOYMENT_NAME_LABEL: "workers", CLUSTER_NAME_LABEL: "c1"}
    assert spec.template.metadata.labels == {DEPLOYMENT_NAME_LABEL: "workers", CLUSTER_NAME_LABEL: "c1"}
    assert created.metadata.labels[CLUSTER_NAME_LABEL] == "c1"
    assert spec.template.spec.version == "v1.30.1"
    assert spec.template.spec.infrastructure_ref.namespace == NS


def test_an_on_delete_strategy_gets_no_rolling_update_defaults(store: SQLiteStore) -> None:
    created = store.create(deployment(strategy={"type": "OnDelete"}))
    assert created.spec.strategy is not None
    assert created.spec.strategy.rolling_update is None


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"selector": {"matchLabels": {"pool": "other"}}}, "spec.template.metadata.labels", "must match"),
        (
            {"strategy": {"rollingUpdate": {"maxSurge": "ten"}}},
            "spec.strategy.rollingUpdate.maxSurge",
            "percentage",
        ),
        (
            {"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}},
            "spec.strategy.rollingUpdate.maxUnavailable",
            "may not be 0",
        ),
        ({"template_version": "latest"}, "spec.template.spec.version", "semantic version"),
        ({"config_ref": True}, "spec.template.spec.bootstrap.configRef", "dataSecretName"),
    ],
)
def test_admission_refuses_naming_the_field(
    store: SQLiteStore, change: dict[str, Any], path: str, words: str
) -> None:
    md = deployment()
    doc = md.to_dict()
    if "template_version" in change:
        doc["spec"]["template"]["spec"]["version"] = change.pop("template_version")
    if change.pop("config_ref", False):
        doc["spec"]["template"]["spec"]["bootstrap"] = {
            "configRef": {
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmConfigTemplate",
                "name": "x",
            }
        }
    doc["spec"].update(change)
    with pytest.raises(Invalid) as refused:
        store.create(MachineDeployment.from_dict(doc))
    assert refused.value.field == path, refused.value
    assert words in str(refused.value)


def test_the_cluster_name_cannot_change(store: SQLiteStore) -> None:
    current = store.create(deployment())
    moved = current.model_copy(deep=True)
    moved.spec.cluster_name = "c2"
    assert [i.path for i in moved.immutable_issues(current)] == ["spec.clusterName"]
    assert current.model_copy(deep=True).immutable_issues(current) == []


def test_percentages_round_up_for_surge_and_down_for_unavailable() -> None:
    assert scaled_value("25%", 3, round_up=True) == 1
    assert scaled_value("25%", 3, round_up=False) == 0
    assert scaled_value("50%", 4, round_up=False) == 2
    assert scaled_value(2, 10, round_up=True) == 2
    with pytest.raises(ValueError, match="percentage"):
        scaled_value("2", 10, round_up=True)


def _machine(name: str, age: int, ready: bool = True, **annotations: str) -> Machine:
    machine = Machine.from_dict(
        {
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {
                "clusterName": "c1",
                "infrastructureRef": {"apiVersion": "v1", "kind": "X", "name": name},
            },
        }
    )
    machine.metadata.creation_timestamp = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=age)
    set_condition(machine.status, READY, ready)
    return machine


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("Oldest", ["marked", "unready", "a", "b", "c"]), ("Newest", ["marked", "unready", "c", "b", "a"])],
)
def test_scale_down_order(policy: Any, expected: list[str]) -> None:
    machines = [
        _machine("b", 2),
        _machine("unready", 5, ready=False),
        _machine("a", 1),
        _machine("marked", 3, **{DELETE_MACHINE_ANNOTATION: "yes"}),
        _machine("c", 4),
    ]
    assert [m.name for m in deletion_order(machines, policy)] == expected
    assert [m.name for m in deletion_order(machines, "Random")] == ["marked", "unready", "a", "b", "c"]
