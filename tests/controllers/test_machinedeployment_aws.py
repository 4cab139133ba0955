"""A MachineDeployment of AWS workers on the embedded store, against the local AWS endpoint (moto): every
Machine gets its own AWSMachine cloned from the machine template, and each becomes an EC2 instance;
scaling down terminates one; deleting the Cluster removes everything.

The template is capa-py's AWSMachineTemplate (its ``spec.template.spec`` is what a clone's spec becomes); the
controllers and the store are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws import AWSMachine
from capa_py.api.cluster import CONTROL_PLANE_LABEL, Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.machinesets import CLONED_FROM_GROUPKIND_ANNOTATION, MachineDeployment
from capa_py.api.meta import KubeObject
from capa_py.api.registry import KindRegistry, default_registry
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.machinesets import MachineDeploymentController, MachineSetController
from controllers.run import ConvergeResult, converge
from tests.controllers.conftest import Harness

INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta2"


@pytest.fixture
def registry() -> KindRegistry:
    return default_registry()


@pytest.fixture
def md_harness(harness: Harness, registry: KindRegistry, tmp_path: Path) -> Iterator[Harness]:
    store = SQLiteStore(tmp_path / "md.db", registry=registry)
    yield Harness(store, harness.server)
    store.close()


def _objects(example: list[KubeObject], registry: KindRegistry) -> list[KubeObject]:
    """The example cluster with its control-plane machine, and its workers as a MachineDeployment."""
    workers = {"demo-worker-0", "demo-worker-1"}
    kept = [o for o in example if o.name not in workers]
    worker_spec = next(o for o in example if isinstance(o, AWSMachine) and o.name == "demo-worker-0").spec
    template_kind = registry.for_gvk(INFRA_API, "AWSMachineTemplate")
    template = template_kind.from_dict(
        {
            "apiVersion": INFRA_API,
            "kind": "AWSMachineTemplate",
            "metadata": {"name": "demo-workers", "namespace": "default"},
            "spec": {
                "template": {"spec": worker_spec.model_dump(mode="json", by_alias=True, exclude_none=True)}
            },
        }
    )
    body: dict[str, Any] = {
        "clusterName": "demo",
        "replicas": 2,
        "template": {
            "spec": {
                "clusterName": "demo",
                "bootstrap": {"dataSecretName": "demo-bootstrap"},
                "infrastructureRef": {
                    "apiVersion": INFRA_API,
                    "kind": "AWSMachineTemplate",
                    "name": "demo-workers",
                },
            }
        },
    }
    md = MachineDeployment.from_dict(
        {"metadata": {"name": "demo-workers", "namespace": "default"}, "spec": body}
    )
    return [*kept, template, md]


def _converge(
    h: Harness, registry: KindRegistry, targets: list[KubeObject], goal: str = "ready"
) -> ConvergeResult:
    controllers = [
        *aws_controllers(h.store, h.pool, h.engine),
        MachineDeploymentController(h.store),
        MachineSetController(h.store, registry),
    ]
    return converge(h.store, controllers, targets, goal=goal, timeout=120)  # type: ignore[arg-type]


def _running_instances(h: Harness) -> set[str]:
    pages = h.aws.ec2.pages("DescribeInstances", "Reservations")
    return {
        i["InstanceId"] for r in pages for i in r["Instances"] if i["State"]["Name"] in ("pending", "running")
    }


def test_a_machine_deployment_of_aws_workers_launches_scales_and_goes_with_its_cluster(
    md_harness: Harness, registry: KindRegistry, example: Callable[[], list[KubeObject]]
) -> None:
    h = md_harness
    stored = h.apply(_objects(example(), registry))
    targets = [o for o in stored if not isinstance(o, Secret) and o.KIND != "AWSMachineTemplate"]
    up = _converge(h, registry, targets)
    assert up.converged, up.states

    workers = [
        m for m in h.store.list(Machine, namespace="default") if CONTROL_PLANE_LABEL not in m.metadata.labels
    ]
    assert len(workers) == 2
    clones = {
        m.name: m for m in h.store.list(AWSMachine, namespace="default") if m.name.startswith("demo-workers-")
    }
    assert sorted(clones) == sorted(m.name for m in workers)
    for clone in clones.values():
        assert clone.spec.instance_type == "t3.medium"
        assert clone.status.instance_id
        assert clone.metadata.annotations[CLONED_FROM_GROUPKIND_ANNOTATION] == (
            "AWSMachineTemplate.infrastructure.cluster.x-k8s.io"
        )
    worker_instances = {c.status.instance_id for c in clones.values()}
    assert worker_instances <= _running_instances(h)
    status = h.store.get(MachineDeployment, "demo-workers", "default").status
    assert (status.replicas, status.ready_replicas, status.phase) == (2, 2, "Running")

    def one(d: MachineDeployment) -> None:
        d.spec.replicas = 1

    md = retry_on_conflict(h.store, h.store.get(MachineDeployment, "demo-workers", "default"), one)
    scaled = _converge(h, registry, [md])
    assert scaled.converged, scaled.states
    left = [m for m in h.store.list(AWSMachine, namespace="default") if m.name.startswith("demo-workers-")]
    assert len(left) == 1
    running = _running_instances(h)
    assert len(worker_instances & running) == 1, "one worker instance was terminated"

    h.store.delete(Cluster, "demo", "default")
    gone = _converge(h, registry, targets, goal="gone")
    assert gone.converged, gone.states
    assert list(h.store.list(Machine, namespace="default")) == []
    assert list(h.store.list(AWSMachine, namespace="default")) == []
    assert not worker_instances & _running_instances(h)
