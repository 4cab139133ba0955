"""AMI lookup by Kubernetes version, base OS and architecture, against moto over HTTP.

Machines without ``spec.ami.id`` are launched from the newest image CAPA's filters find (``owner-id``,
``name`` from ``imageLookupFormat``, ``architecture`` from the instance type, ``state=available``,
``virtualization-type=hvm``); the image is read back from the instance moto launched.

The images are published with ``CopyImage`` from one of moto's bundled images of the wanted architecture:
the copy is owned by moto's account (passed as ``imageLookupOrg``) and keeps the source's architecture
and virtualization type. moto's ``RegisterImage`` keeps neither (it takes only a name and a description),
so CAPA's filters would never match a registered image. moto stamps ``CreationDate`` to the second:
:func:`publish` makes each image at least a second newer than the one before, so "newest" is decided by
the dates and not by the order of the answer.

The harness shares observations as ``capa apply`` and ``capa controller`` do (``AWSSettings(observe=True)``),
which is what keeps a lookup's answer for every machine of the process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Machine
from capa_py.api.conditions import get_condition
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.api.registry import default_registry
from capa_py.aws.accounting import PROCESS_COUNTER
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.machinesets import MachineDeploymentController, MachineSetController
from controllers.run import ConvergeResult
from controllers.services.instances import INSTANCE_READY
from tests.controllers.conftest import Harness, without_user_aws_settings
from tests.controllers.pending import reconcile_pass
from tests.harness.moto_server import MotoServer

MOTO_ACCOUNT = "123456789012"
LOOKUP_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-lookup.yaml"
MACHINES = ("demo-control-plane-0", "demo-worker-0", "demo-worker-1")
_sources: dict[str, str] = {}


class Lookups(Harness):
    """A store, a client pool sharing observations (as the CLI's) and the AWS controllers."""

    def __init__(self, store: SQLiteStore, server: MotoServer) -> None:
        super().__init__(store, server, observe=True)
        self.published: list[str] = []

    def restart(self) -> None:
        """A new process: a new client pool, nothing known."""
        self.pool = self.new_pool()

    def controllers(self) -> list:  # type: ignore[type-arg]
        """The AWS controllers, and the MachineDeployment and MachineSet controllers."""
        return [
            *super().controllers(),
            MachineDeploymentController(self.store),
            MachineSetController(self.store, default_registry()),
        ]

    def converge(
        self, targets: list[KubeObject], goal: str = "ready", timeout: float = 90.0
    ) -> ConvergeResult:
        return super().converge([o for o in targets if o.KIND != "Secret"], goal, timeout)

    def source(self, architecture: str) -> str:
        """One of moto's bundled hvm images of ``architecture`` (their ids survive a reset)."""
        if architecture not in _sources:
            images = self.aws.ec2.call(
                "DescribeImages",
                Filters=[
                    {"Name": "architecture", "Values": [architecture]},
                    {"Name": "virtualization-type", "Values": ["hvm"]},
                    {"Name": "state", "Values": ["available"]},
                ],
            )["Images"]
            _sources[architecture] = sorted(i["ImageId"] for i in images)[0]
        return _sources[architecture]

    def publish(self, name: str, architecture: str = "x86_64") -> str:
        """An image named ``name`` owned by moto's account, newer than every image published before."""
        previous = self._created(self.published[-1]) if self.published else ""
        while True:
            image_id = str(
                self.aws.ec2.call(
                    "CopyImage", SourceImageId=self.source(architecture), SourceRegion="us-east-1", Name=name
                )["ImageId"]
            )
            if self._created(image_id) > previous:
                self.published.append(image_id)
                return image_id
            self.aws.ec2.call("DeregisterImage", ImageId=image_id)
            time.sleep(0.25)  # moto's CreationDate has whole seconds

    def _created(self, image_id: str) -> str:
        return str(self.aws.ec2.call("DescribeImages", ImageIds=[image_id])["Images"][0]["CreationDate"])

    def machine(self, name: str) -> AWSMachine:
        return self.store.get(AWSMachine, name, "default")

    def launched_image(self, name: str) -> str:
        instance_id = self.machine(name).status.instance_id
        assert instance_id, f"{name} has no instance"
        reservations = self.aws.ec2.call("DescribeInstances", InstanceIds=[instance_id])["Reservations"]
        return str(reservations[0]["Instances"][0]["ImageId"])


@pytest.fixture
def lookups(moto_with_amis: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lookups]:
    without_user_aws_settings(monkeypatch, tmp_path)
    moto_with_amis.reset()
    store = SQLiteStore(tmp_path / "state.db")
    yield Lookups(store, moto_with_amis)
    store.close()


def looked_up(
    example: Callable[[], list[KubeObject]],
    cluster: dict[str, str] | None = None,
    machines: dict[str, dict[str, Any]] | None = None,
) -> list[KubeObject]:
    """The example with no ``ami.id``: every machine looks its image up, the AWSCluster's lookup fields
    set to ``cluster`` (the owner: moto's account) and a machine's spec updated by ``machines[name]``."""
    objects = example()
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.image_lookup_org = MOTO_ACCOUNT
            for field, value in (cluster or {}).items():
                setattr(obj.spec, field, value)
        if isinstance(obj, AWSMachine):
            obj.spec.ami.id = None
            obj.spec.instance_type = "t3.medium"
            for field, value in (machines or {}).get(obj.name, {}).items():
                setattr(obj.spec, field, value)
    return objects


def test_version_os_and_architecture_choose_the_image(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    x86 = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1700000000")
    arm = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1700000001", "arm64")
    lookups.publish("capa-ami-ubuntu-24.04-v1.30.4-1700000002")  # another Kubernetes version
    lookups.publish("capa-ami-ubuntu-22.04-v1.31.0-1700000003")  # another base OS
    lookups.publish("team-ami-ubuntu-24.04-v1.31.0-1700000004")  # another format
    objects = lookups.apply(looked_up(example, machines={"demo-worker-1": {"instance_type": "t4g.medium"}}))
    result = lookups.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    assert lookups.launched_image("demo-control-plane-0") == x86
    assert lookups.launched_image("demo-worker-0") == x86
    assert lookups.launched_image("demo-worker-1") == arm, "a t4g (arm64) machine needs an arm64 image"
    recorded = lookups.machine("demo-worker-1").status.ami
    assert recorded is not None
    assert recorded.model_dump(by_alias=True, exclude={"creation_date"}) == {
        "id": arm,
        "name": "capa-ami-ubuntu-24.04-v1.31.0-1700000001",
        "ownerID": MOTO_ACCOUNT,
        "namePattern": "capa-ami-ubuntu-24.04-?1.31.0-*",
        "architecture": "arm64",
    }


def test_the_newest_image_wins_and_the_machine_keeps_it_after_a_newer_one_and_a_restart(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-zz-oldest")
    newest = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-aa-newest")  # names sort the other way
    objects = lookups.apply(looked_up(example))
    assert lookups.converge(objects).converged
    instances = {name: lookups.machine(name).status.instance_id for name in MACHINES}
    assert {lookups.launched_image(name) for name in MACHINES} == {newest}

    later = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-published-later")
    lookups.restart()
    runs_before = PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0)
    assert lookups.converge(objects).converged
    assert PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0) == runs_before
    for name in MACHINES:
        machine = lookups.machine(name)
        assert machine.status.instance_id == instances[name], f"{name}'s instance was replaced"
        assert machine.status.ami is not None, name
        assert machine.status.ami.id == newest, machine.status.ami
        assert lookups.launched_image(name) == newest
    assert later not in {lookups.launched_image(name) for name in MACHINES}


def test_ami_id_wins_over_the_lookup_fields(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")
    given = lookups.source("x86_64")
    objects = looked_up(example)
    for obj in objects:
        if isinstance(obj, AWSMachine) and obj.name == "demo-worker-0":
            obj.spec.ami.id = given
            obj.spec.image_lookup_base_os = "ubuntu-24.04"
    assert lookups.converge(lookups.apply(objects)).converged
    assert lookups.launched_image("demo-worker-0") == given
    assert lookups.machine("demo-worker-0").status.ami is None, "no lookup is recorded for an ami.id"


def test_the_clusters_defaults_apply_and_a_machines_own_fields_win(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    team = lookups.publish("team-flatcar-1.31.0-1")
    mine = lookups.publish("team-rocky-9-1.31.0-1")
    capa_flatcar = lookups.publish("capa-ami-flatcar-v1.31.0-1")
    lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")  # CAPA's defaults: nobody's lookup here
    cluster = {"image_lookup_format": "team-{{.BaseOS}}-{{.K8sVersion}}-*", "image_lookup_base_os": "flatcar"}
    machines: dict[str, dict[str, Any]] = {
        "demo-worker-1": {"image_lookup_base_os": "rocky-9"},
        "demo-control-plane-0": {"image_lookup_format": "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*"},
    }
    objects = lookups.apply(looked_up(example, cluster=cluster, machines=machines))
    assert lookups.converge(objects).converged
    assert lookups.launched_image("demo-worker-0") == team, "the AWSCluster's format and base OS apply"
    assert lookups.launched_image("demo-worker-1") == mine, "the machine's base OS wins"
    assert lookups.launched_image("demo-control-plane-0") == capa_flatcar, (
        "the machine's format wins, with the AWSCluster's base OS"
    )


def test_one_describe_images_and_one_describe_instance_types_serve_every_machine_of_a_cluster(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    """Three machines of one instance type and one lookup: the first asks, the others are served from the
    process's knowledge (the lookup's answer also names the image's root device)."""
    image = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")
    objects = lookups.apply(looked_up(example))
    before = PROCESS_COUNTER.by_operation()
    assert lookups.converge(objects).converged
    after = PROCESS_COUNTER.by_operation()
    calls = {
        op: after.get(op, 0) - before.get(op, 0) for op in ("ec2:DescribeImages", "ec2:DescribeInstanceTypes")
    }
    assert calls == {"ec2:DescribeImages": 1, "ec2:DescribeInstanceTypes": 1}, calls
    assert {lookups.launched_image(name) for name in MACHINES} == {image}


def test_no_matching_image_says_which_filters_matched_nothing_creates_nothing_and_retries(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    lookups.publish("capa-ami-ubuntu-24.04-v1.30.0-1")  # not the machines' version
    objects = lookups.apply(looked_up(example))
    cluster_only = [o for o in objects if o.KIND in ("Cluster", "AWSCluster")]
    assert lookups.converge(cluster_only).converged
    runs_before = PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0)
    controllers = aws_controllers(lookups.store, lookups.pool, lookups.engine)
    for _ in range(3):  # the core claims the machines, then their infrastructure reconciles
        reconcile_pass(controllers, lookups.store)
    machine = lookups.machine("demo-worker-0")
    condition = get_condition(machine.status, INSTANCE_READY)
    assert condition is not None
    assert condition.status == "False", condition
    assert condition.reason == "AMINotFound", condition
    for part in (
        f"owner-id={MOTO_ACCOUNT}",
        "name=capa-ami-ubuntu-24.04-?1.31.0-*",
        "architecture=x86_64",
        "state=available",
        "virtualization-type=hvm",
        "imageLookupBaseOS 'ubuntu-24.04'",
        "Kubernetes version v1.31.0",
    ):
        assert part in (condition.message or ""), condition.message
    assert machine.status.failure_reason is None, "no image yet is not a permanent failure"
    assert machine.status.ami is None
    assert machine.status.instance_id is None
    assert PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0) == runs_before, (
        "an instance was launched"
    )

    published = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")
    lookups.restart()  # a lookup that found nothing is not kept: a restart is not what makes it ask again
    assert lookups.converge(objects).converged
    assert {lookups.launched_image(name) for name in MACHINES} == {published}


def test_a_machine_stored_without_a_version_or_an_ami_waits_with_missing_ami(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    """A Machine without a version that reached the store some other way (kubectl, one object at a time)
    is refused by the controller before anything of it is built."""
    objects = looked_up(example)
    for obj in objects:
        if isinstance(obj, Machine) and obj.name == "demo-worker-0":
            obj.spec.version = None
    for obj in objects:
        lookups.store.create(obj)
    lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")
    runs_before = PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0)
    controllers = aws_controllers(lookups.store, lookups.pool, lookups.engine)
    for _ in range(2):
        reconcile_pass(controllers, lookups.store)
    condition = get_condition(lookups.machine("demo-worker-0").status, INSTANCE_READY)
    assert condition is not None
    assert condition.reason == "MissingAMI", condition
    assert "Machine has no spec.version" in (condition.message or ""), condition.message
    assert lookups.machine("demo-worker-0").status.instance_id is None
    assert lookups.machine("demo-worker-0").status.ami is None
    launched = PROCESS_COUNTER.by_operation().get("ec2:RunInstances", 0) - runs_before
    assert launched == 2, f"{launched} launches: only the two machines with a version have an image"


def test_the_lookup_example_converges_with_every_machine_on_the_published_image(
    lookups: Lookups,
) -> None:
    """examples/aws-cluster-lookup.yaml: a control-plane machine, and a MachineDeployment whose
    AWSMachineTemplate has no ``ami.id``; the example's steps on the embedded endpoint (publish with
    ``CopyImage`` of ami-785db401, then apply)."""
    image = str(
        lookups.aws.ec2.call(
            "CopyImage",
            SourceImageId="ami-785db401",
            SourceRegion="us-east-1",
            Name="capa-ami-ubuntu-24.04-v1.31.0-1",
        )["ImageId"]
    )
    objects = lookups.apply(load_manifests([LOOKUP_EXAMPLE]))
    result = lookups.converge(objects)
    assert result.converged, [(m.name, m.status.conditions) for m in lookups.store.list(AWSMachine)]
    machines = list(lookups.store.list(AWSMachine))
    assert len(machines) == 3, [m.name for m in machines]
    for machine in machines:
        assert machine.status.ami is not None, machine.name
        assert machine.status.ami.id == image, machine.status.ami
        assert lookups.launched_image(machine.name) == image


def test_a_running_machine_that_lost_its_recorded_image_keeps_its_instance(
    lookups: Lookups, example: Callable[[], list[KubeObject]]
) -> None:
    """A machine whose ``status.ami`` is gone (a status restored without it) is judged by the image its
    instance runs, not by a new lookup that now finds a newer image (before, the lookup ran again and
    status.ami named the newer image, which the instance does not run)."""
    first = lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-1")
    objects = lookups.apply(looked_up(example))
    assert lookups.converge(objects).converged
    before = lookups.machine("demo-worker-0").status.instance_id

    def forget(machine: AWSMachine) -> None:
        machine.status.ami = None

    retry_on_conflict(lookups.store, lookups.machine("demo-worker-0"), forget, status=True)
    lookups.publish("capa-ami-ubuntu-24.04-v1.31.0-2")
    lookups.restart()
    result = lookups.converge(objects)
    assert result.converged, result.states
    machine = lookups.machine("demo-worker-0")
    assert machine.status.instance_id == before
    assert lookups.launched_image("demo-worker-0") == first
    assert machine.status.failure_reason is None, machine.status.failure_message
    recorded = machine.status.ami
    assert recorded is None or recorded.id == first, (
        f"status.ami names an image the instance does not run: {recorded}"
    )
