"""The bare-metal provider through ``capa``: the example converges under ``capa apply --wait`` (no AWS
needed), ``capa get`` prints the provider's columns, invalid objects exit 2 naming the field, and what
the controllers request of the store is what the ClusterRole grants.

No agent runs here: a background thread does what the gRPC server does when agents run each prepared
Workflow's actions (capa_py.tinkerbell.states, written to the same SQLite store).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api import load_manifests
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.api.tinkerbell_capi import HARDWARE_OWNER_NAME_LABEL, TinkerbellMachine
from capa_py.manifests.rbac import READ_FROM_THE_CACHE, cluster_role
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from controllers import embedded_controllers, needs_aws
from controllers.run import converge
from tests.cli.cli_support import Cli
from tests.cli.conftest import cli, state  # noqa: F401 - the capa CLI fixtures
from tests.manifests.recording_store import RecordingStore
from tests.tinkerbell.capt_world import WAIT, run_workflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster-machines.yaml"
MACHINES = ("lab-cp-0", "lab-worker-0", "lab-worker-1")


def _table(text: str) -> list[dict[str, str]]:
    header, *lines = text.splitlines()
    names = [m.group() for m in re.finditer(r"\S+(?: \S+)*", header)]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = [*starts[1:], None]
    return [
        {n: line[s:e].strip() for n, s, e in zip(names, starts, bounds, strict=True)}
        for line in lines
        if line
    ]


def _drive_prepared(store: SQLiteStore) -> None:
    for workflow in store.list(Workflow):
        if workflow.status.state == "Pending" and workflow.status.actions:
            run_workflow(store, workflow.name)


@contextmanager
def agents(path: Path) -> Iterator[None]:
    """What the server does as agents run every prepared Workflow, from another connection."""
    stop = threading.Event()

    def loop() -> None:
        store = SQLiteStore(path)
        try:
            while not stop.wait(0.05):
                _drive_prepared(store)
        finally:
            store.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=WAIT)


def test_the_example_converges_under_capa_apply_and_capa_get_shows_it(cli: Cli, state: Path) -> None:  # noqa: F811
    objects = load_manifests([EXAMPLE])
    assert not needs_aws(objects), "a bare-metal cluster needs no AWS"
    with agents(state):
        result = cli("apply", "-f", str(EXAMPLE), "--timeout", "60s")
    assert result.exit_code == 0, str(result)

    machines = {row["NAME"]: row for row in _table(cli("get", "machines").stdout)}
    assert set(machines) == set(MACHINES)
    assert {row["PHASE"] for row in machines.values()} == {"Provisioned"}
    tms = {row["NAME"]: row for row in _table(cli("get", "tinkerbellmachines").stdout)}
    assert {row["READY"] for row in tms.values()} == {"true"}
    assert {row["CLUSTER"] for row in tms.values()} == {"lab"}
    assert tms["lab-cp-0"]["HARDWARE"] == "lab-1", "the only control-plane Hardware"
    assert {tms["lab-worker-0"]["HARDWARE"], tms["lab-worker-1"]["HARDWARE"]} == {"lab-4", "lab-5"}, (
        "rack b preferred"
    )
    for name, row in tms.items():
        assert machines[name]["PROVIDERID"] == row["PROVIDERID"] == f"tinkerbell://default/{row['HARDWARE']}"
    clusters = _table(cli("get", "tinkerbellclusters").stdout)
    assert [(c["NAME"], c["CLUSTER"], c["READY"], c["ENDPOINT"]) for c in clusters] == [
        ("lab", "lab", "true", "127.0.0.100:6443")
    ]
    store = SQLiteStore(state)
    free = [h.name for h in store.list(Hardware) if HARDWARE_OWNER_NAME_LABEL not in h.metadata.labels]
    assert sorted(free) == ["lab-2", "lab-3"]
    # Deleting a machine frees its Hardware.
    deleted = cli("delete", "machine", "lab-worker-0", "--wait", "--timeout", "60s")
    assert deleted.exit_code == 0, str(deleted)
    freed = tms["lab-worker-0"]["HARDWARE"]
    hw = store.get(Hardware, freed, "default")
    assert HARDWARE_OWNER_NAME_LABEL not in hw.metadata.labels
    assert hw.spec.instance is None or hw.spec.instance.userdata is None
    store.close()


def test_the_controllers_request_only_what_the_cluster_role_grants(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    recording = RecordingStore(store)
    objects = load_manifests([EXAMPLE])
    apply_objects(store, objects)
    controllers = embedded_controllers(recording, None, None)  # type: ignore[arg-type]
    targets: list[KubeObject] = [o for o in objects if isinstance(o, Cluster | Machine | TinkerbellMachine)]
    created = converge(
        recording,  # type: ignore[arg-type]
        controllers,
        targets,
        timeout=WAIT,
        on_tick=lambda _: _drive_prepared(store),
    )
    assert created.converged, created.states
    store.delete(Cluster, "lab", "default")
    gone = converge(recording, controllers, targets, goal="gone", timeout=WAIT)  # type: ignore[arg-type]
    assert gone.converged, gone.states
    granted = {
        (group, resource, verb)
        for rule in cluster_role()["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    # What `capa controller` answers from its informers' cache (Secrets by name) is never asked of the API
    # server, so the role does not grant it: the in-process recording sees it all the same.
    cached = {(m.API_VERSION.rpartition("/")[0], m.PLURAL, verb) for m, verb, _why in READ_FROM_THE_CACHE}
    used = recording.requests - cached
    assert used - granted == set(), f"requests the ClusterRole does not allow: {sorted(used - granted)}"
    # The provider's own requests were recorded (claims, workflows made and deleted, its kinds' status).
    assert {
        ("tinkerbell.org", "hardware", "update"),
        ("tinkerbell.org", "templates", "create"),
        ("tinkerbell.org", "templates", "delete"),
        ("tinkerbell.org", "workflows", "create"),
        ("tinkerbell.org", "workflows", "delete"),
        ("infrastructure.cluster.x-k8s.io", "tinkerbellmachines/status", "update"),
        ("infrastructure.cluster.x-k8s.io", "tinkerbellmachines/finalizers", "update"),
        ("infrastructure.cluster.x-k8s.io", "tinkerbellclusters/status", "update"),
    } <= used
    store.close()


def _machine_doc(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TinkerbellMachine",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": spec,
    }


def _term(**selector: Any) -> dict[str, Any]:
    return {"labelSelector": selector}


INVALID = [
    (
        "weight",
        _machine_doc({"hardwareAffinity": {"preferred": [{"weight": 101, "hardwareAffinityTerm": _term()}]}}),
        "spec.hardwareAffinity.preferred[0].weight: 101 is not in 1-100",
    ),
    (
        "operator",
        _machine_doc(
            {"hardwareAffinity": {"required": [_term(matchExpressions=[{"key": "rack", "operator": "Gt"}])]}}
        ),
        "spec.hardwareAffinity.required[0].labelSelector.matchExpressions[0].operator: 'Gt' is not a valid "
        "operator (one of In, NotIn, Exists, DoesNotExist)",
    ),
    (
        "values for Exists",
        _machine_doc(
            {
                "hardwareAffinity": {
                    "required": [
                        _term(matchExpressions=[{"key": "rack", "operator": "Exists", "values": ["a"]}])
                    ]
                }
            }
        ),
        "spec.hardwareAffinity.required[0].labelSelector.matchExpressions[0].values: "
        "must be empty for Exists",
    ),
    (
        "no values for In",
        _machine_doc(
            {
                "hardwareAffinity": {
                    "preferred": [
                        {
                            "weight": 5,
                            "hardwareAffinityTerm": _term(
                                matchExpressions=[{"key": "rack", "operator": "In"}]
                            ),
                        }
                    ]
                }
            }
        ),
        "spec.hardwareAffinity.preferred[0].hardwareAffinityTerm.labelSelector.matchExpressions[0].values: "
        "must be non-empty for In",
    ),
    (
        "label key",
        _machine_doc({"hardwareAffinity": {"required": [_term(matchLabels={"bad key": "x"})]}}),
        "spec.hardwareAffinity.required[0].labelSelector.matchLabels[\"bad key\"]: 'bad key' is not a valid "
        "label key",
    ),
    (
        "template not yaml",
        _machine_doc({"templateOverride": "actions: [unclosed"}),
        "spec.templateOverride: not YAML at line 1, column 19",
    ),
    (
        "template field",
        _machine_doc({"templateOverride": "actions:\n  - name: a\n    image: x\n    retries: 3\n"}),
        "spec.templateOverride: actions.0.retries: Extra inputs are not permitted",
    ),
    (
        "template check",
        _machine_doc({"templateOverride": "actions:\n  - name: a\n    image: ' '\n"}),
        "spec.templateOverride: actions[0].image: required",
    ),
    (
        "template empty",
        _machine_doc({"templateOverride": "env: {}\n"}),
        "spec.templateOverride: actions: at least one action is required",
    ),
    (
        "machine template",
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TinkerbellMachineTemplate",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"template": {"spec": {"templateOverride": "- a list"}}},
        },
        "spec.template.spec.templateOverride: "
        "must be a YAML mapping: a Template's spec (actions, env, volumes)",
    ),
    (
        "endpoint",
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TinkerbellCluster",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"controlPlaneEndpoint": {"host": "", "port": 0}},
        },
        "spec.controlPlaneEndpoint.host: required",
    ),
]


@pytest.mark.parametrize(("case", "document", "message"), INVALID, ids=[c for c, _, _ in INVALID])
def test_an_invalid_object_exits_2_naming_the_field_and_stores_nothing(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
    case: str,
    document: dict[str, Any],
    message: str,
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    result = cli("apply", "-f", str(path), "--no-wait")
    assert result.exit_code == 2, f"{case}:\n{result}"
    assert message in result.stderr, str(result)
    plural = {"TinkerbellMachine": "tinkerbellmachines"}.get(document["kind"], document["kind"].lower() + "s")
    listed = cli("get", plural, "-A")
    assert "bad" not in listed.stdout


def test_apply_stops_waiting_when_no_hardware_can_be_had(cli: Cli, tmp_path: Path) -> None:  # noqa: F811
    """Only a person can add Hardware: the wait ends at once, saying so, rather than at its timeout."""
    documents = [
        d
        for d in yaml.safe_load_all(EXAMPLE.read_text())
        if d["kind"] != "Hardware" and d["metadata"]["name"] in ("lab", "lab-cp-0", "lab-cp-0-bootstrap")
    ]
    path = tmp_path / "no-hardware.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    result = cli("apply", "-f", str(path), "--timeout", "600s")
    assert result.exit_code != 0, str(result)
    assert "every object not ready is blocked on something that will not change by itself" in result.stderr
    assert "TinkerbellMachine default/lab-cp-0: NoHardwareAvailable" in result.stderr, str(result)
    assert "no free hardware in namespace default matches spec.hardwareAffinity.required" in result.stderr
