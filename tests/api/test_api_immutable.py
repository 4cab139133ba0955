"""Immutable spec fields: which changes the models refuse, and that ``apply_objects`` refuses them before
writing anything (the CLI test over the local endpoint is in tests/cli/test_spec_honoured.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capa_py.api.aws import (
    AWSCluster,
    AWSMachine,
    AWSResourceReference,
    CloudInit,
    IntentRecord,
    RecordedResource,
    Volume,
)
from capa_py.api.cluster import APIEndpoint, Cluster, Machine
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject, utcnow
from capa_py.operations import apply_objects
from capa_py.store.errors import Invalid
from capa_py.store.sqlite import SQLiteStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


def _objects() -> list[KubeObject]:
    return load_manifests([EXAMPLE])


def _one(objects: list[KubeObject], kind: type[KubeObject], name: str = "demo") -> KubeObject:
    return next(o for o in objects if isinstance(o, kind) and o.name == name)


def _worker(objects: list[KubeObject], launched: bool = True) -> AWSMachine:
    """The worker's AWSMachine, with a recorded instance unless ``launched`` is False."""
    machine = _one(objects, AWSMachine, "demo-worker-0")
    assert isinstance(machine, AWSMachine)
    if launched:
        machine.status.resources["instance"] = RecordedResource(kind="instance", id="i-0123456789abcdef0")
    return machine


def _awscluster(objects: list[KubeObject]) -> AWSCluster:
    cluster = _one(objects, AWSCluster)
    assert isinstance(cluster, AWSCluster)
    return cluster


def _issues(old: KubeObject, change: Callable[[KubeObject], None]) -> dict[str, str]:
    new = old.model_copy(deep=True)
    change(new)
    return {issue.path: issue.message for issue in new.immutable_issues(old)}


# -- the rules -----------------------------------------------------------------------------------------


MACHINE_IMMUTABLE: dict[str, tuple[Callable[[AWSMachine], None], str]] = {
    "spec.instanceType": (
        lambda m: setattr(m.spec, "instance_type", "t3.large"),
        "immutable (was t3.medium, now t3.large)",
    ),
    "spec.ami.id": (lambda m: setattr(m.spec.ami, "id", "ami-0123456789abcdef0"), "was ami-785db401"),
    "spec.iamInstanceProfile": (lambda m: setattr(m.spec, "iam_instance_profile", "nodes"), "was unset"),
    "spec.publicIP": (lambda m: setattr(m.spec, "public_ip", True), "now true"),
    "spec.sshKeyName": (lambda m: setattr(m.spec, "ssh_key_name", "admin"), "now admin"),
    "spec.subnet": (lambda m: setattr(m.spec, "subnet", AWSResourceReference(id="subnet-1")), "now {"),
    "spec.rootVolume": (lambda m: setattr(m.spec, "root_volume", Volume(size=50)), "was unset"),
}


@pytest.mark.parametrize("path", sorted(MACHINE_IMMUTABLE))
def test_awsmachine_fields_capa_treats_as_immutable_are_named_with_both_values(path: str) -> None:
    change, message = MACHINE_IMMUTABLE[path]
    issues = _issues(_worker(_objects()), change)  # type: ignore[arg-type]
    assert list(issues) == [path], issues
    assert message in issues[path], issues


@pytest.mark.parametrize("path", sorted(MACHINE_IMMUTABLE))
def test_awsmachine_spec_can_be_corrected_until_an_instance_exists(path: str) -> None:
    change, _ = MACHINE_IMMUTABLE[path]
    assert _issues(_worker(_objects(), launched=False), change) == {}  # type: ignore[arg-type]


def test_awsmachine_cloud_init_secret_fields_are_the_controllers_and_stay_mutable() -> None:
    def change(m: KubeObject) -> None:
        assert isinstance(m, AWSMachine)
        m.spec.cloud_init = CloudInit(secret_prefix="aws.cluster.x-k8s.io/0a1b", secret_count=2)

    machine = _worker(_objects())
    assert _issues(machine, change) == {}, "written by the controller into a spec that had no cloudInit"
    machine.spec.cloud_init = CloudInit(secret_prefix="aws.cluster.x-k8s.io/0a1b", secret_count=2)
    assert _issues(machine, lambda m: setattr(m.spec, "cloud_init", None)) == {}


def test_awsmachine_insecure_skip_secrets_manager_is_immutable_once_launched() -> None:
    def change(m: KubeObject) -> None:
        assert isinstance(m, AWSMachine)
        m.spec.cloud_init = CloudInit(insecure_skip_secrets_manager=True)

    assert list(_issues(_worker(_objects()), change)) == ["spec.cloudInit"]


@pytest.mark.parametrize("path", sorted(MACHINE_IMMUTABLE))
def test_awsmachine_with_bootstrap_data_stored_but_no_instance_launched_can_be_corrected(path: str) -> None:
    """Its secrets are stored before the launch: a machine whose launch AWS refused has them, and nothing to
    protect yet."""
    change, _ = MACHINE_IMMUTABLE[path]
    machine = _worker(_objects(), launched=False)
    machine.status.resources["bootstrap-secret-demo-worker-0-0"] = RecordedResource(
        kind="secret", id="aws.cluster.x-k8s.io/0a1b-0"
    )
    assert _issues(machine, change) == {}  # type: ignore[arg-type]


def test_awsmachine_with_only_an_intent_is_already_immutable() -> None:
    machine = _worker(_objects(), launched=False)
    machine.status.intents["instance"] = IntentRecord(kind="instance", started_at=utcnow(), fingerprint="f")
    issues = _issues(machine, MACHINE_IMMUTABLE["spec.instanceType"][0])  # type: ignore[arg-type]
    assert list(issues) == ["spec.instanceType"], issues


def test_awsmachine_controller_fields_tags_and_additional_groups_stay_mutable() -> None:
    def change(m: KubeObject) -> None:
        assert isinstance(m, AWSMachine)
        m.spec.provider_id = "aws:///us-east-1a/i-0123"
        m.spec.instance_id = "i-0123"
        m.spec.additional_tags = {"team": "other"}
        m.spec.additional_security_groups = [AWSResourceReference(id="sg-0123")]

    assert _issues(_worker(_objects()), change) == {}


def test_awsmachine_root_volume_change_names_the_leaf_field() -> None:
    machine = _one(_objects(), AWSMachine, "demo-control-plane-0")
    assert isinstance(machine, AWSMachine)
    machine.status.instance_id = "i-0123456789abcdef0"
    issues = _issues(machine, lambda m: setattr(m.spec.root_volume, "size", 80))  # type: ignore[union-attr]
    assert issues == {"spec.rootVolume.size": "immutable (was 40, now 80)"}


CLUSTER_IMMUTABLE: dict[str, Callable[[AWSCluster], None]] = {
    "spec.region": lambda c: setattr(c.spec, "region", "us-west-2"),
    "spec.controlPlaneLoadBalancer.scheme": lambda c: setattr(
        c.spec.control_plane_load_balancer, "scheme", "internal"
    ),
    "spec.controlPlaneLoadBalancer.name": lambda c: setattr(c.spec.control_plane_load_balancer, "name", "x"),
    "spec.controlPlaneLoadBalancer.additionalSecurityGroups": lambda c: setattr(
        c.spec.control_plane_load_balancer, "additional_security_groups", ["sg-0123"]
    ),
    "spec.network.vpc.cidrBlock": lambda c: setattr(c.spec.network.vpc, "cidr_block", "10.9.0.0/16"),
    "spec.network.vpc.id": lambda c: setattr(c.spec.network.vpc, "id", "vpc-0123"),
    "spec.network.vpc.availabilityZoneUsageLimit": lambda c: setattr(
        c.spec.network.vpc, "availability_zone_usage_limit", 2
    ),
    "spec.network.vpc.availabilityZoneSelection": lambda c: setattr(
        c.spec.network.vpc, "availability_zone_selection", "Random"
    ),
    "spec.network.subnets[2].availabilityZone": lambda c: setattr(
        c.spec.network.subnets[2], "availability_zone", "us-east-1d"
    ),
    "spec.network.subnets": lambda c: c.spec.network.subnets.pop(),
}


@pytest.mark.parametrize("path", sorted(CLUSTER_IMMUTABLE))
def test_awscluster_immutable_fields_are_named(path: str) -> None:
    issues = _issues(_awscluster(_objects()), CLUSTER_IMMUTABLE[path])  # type: ignore[arg-type]
    assert list(issues) == [path], issues
    assert issues[path].startswith("immutable (was "), issues


def test_awscluster_tags_ssh_key_and_cross_zone_stay_mutable() -> None:
    def change(c: KubeObject) -> None:
        assert isinstance(c, AWSCluster)
        c.spec.additional_tags = {"team": "other"}
        c.spec.network.vpc.tags = {"cost-center": "42"}
        c.spec.network.subnets[0].tags = {"tier": "edge"}
        c.spec.control_plane_load_balancer.cross_zone_load_balancing = True
        c.spec.ssh_key_name = "admin"

    assert _issues(_awscluster(_objects()), change) == {}


def test_awscluster_control_plane_endpoint_is_free_until_set_then_immutable() -> None:
    cluster = _awscluster(_objects())
    endpoint = APIEndpoint(host="api.example.com", port=6443)
    assert _issues(cluster, lambda c: setattr(c.spec, "control_plane_endpoint", endpoint)) == {}
    cluster.spec.control_plane_endpoint = endpoint
    issues = _issues(cluster, lambda c: setattr(c.spec, "control_plane_endpoint", APIEndpoint()))
    assert issues == {
        "spec.controlPlaneEndpoint.host": 'immutable (was api.example.com, now "")',
        "spec.controlPlaneEndpoint.port": "immutable (was 6443, now 0)",
    }


def test_machine_cluster_name_is_immutable() -> None:
    machine = _one(_objects(), Machine, "demo-worker-0")
    issues = _issues(machine, lambda m: setattr(m.spec, "cluster_name", "other"))  # type: ignore[attr-defined]
    assert issues == {"spec.clusterName": "immutable (was demo, now other)"}


# -- apply_objects -------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _launched(store: SQLiteStore) -> None:
    """Record an instance for every stored AWSMachine, as the controller does once it launched one."""
    for machine in store.list(AWSMachine):
        machine.status.resources["instance"] = RecordedResource(kind="instance", id="i-0123456789abcdef0")
        store.update_status(machine)


def _everything(store: SQLiteStore) -> list[dict[str, object]]:
    kinds: tuple[type[KubeObject], ...] = (Cluster, AWSCluster, Machine, AWSMachine)
    return [o.to_dict() for kind in kinds for o in store.list(kind)]


def test_apply_refuses_an_immutable_change_before_writing_any_document(store: SQLiteStore) -> None:
    apply_objects(store, _objects())
    _launched(store)
    before = _everything(store)
    objects = _objects()
    _awscluster(objects).spec.additional_tags = {"team": "changed"}  # a mutable change, earlier in order
    _worker(objects).spec.instance_type = "t3.large"
    with pytest.raises(Invalid) as refused:
        apply_objects(store, objects)
    assert str(refused.value) == (
        "AWSMachine default/demo-worker-0: spec.instanceType: immutable (was t3.medium, now t3.large)"
    )
    assert _everything(store) == before, "a refused apply changed the store"


def test_apply_keeps_controller_set_fields_the_manifest_leaves_unset(store: SQLiteStore) -> None:
    apply_objects(store, _objects())
    worker = store.get(AWSMachine, "demo-worker-0", "default")
    worker.spec.provider_id = "aws:///us-east-1a/i-0123"
    worker.spec.instance_id = "i-0123"
    store.update(worker)
    cluster = store.get(AWSCluster, "demo", "default")
    cluster.spec.control_plane_endpoint = APIEndpoint(host="lb.example.com", port=6443)
    store.update(cluster)

    objects = _objects()
    _worker(objects).spec.additional_tags = {"role": "batch"}
    outcomes = {a.object.ref(): a.outcome for a in apply_objects(store, objects)}
    assert outcomes["AWSMachine default/demo-worker-0"] == "configured", outcomes
    stored = store.get(AWSMachine, "demo-worker-0", "default")
    assert stored.spec.additional_tags == {"role": "batch"}
    assert stored.spec.provider_id == "aws:///us-east-1a/i-0123"
    endpoint = store.get(AWSCluster, "demo", "default").spec.control_plane_endpoint
    assert endpoint == APIEndpoint(host="lb.example.com", port=6443)


def test_apply_names_every_refused_field_of_every_document(store: SQLiteStore) -> None:
    apply_objects(store, _objects())
    _launched(store)
    objects = _objects()
    _awscluster(objects).spec.region = "us-west-2"
    _worker(objects).spec.instance_type = "t3.large"
    with pytest.raises(Invalid) as refused:
        apply_objects(store, objects)
    message = str(refused.value)
    assert "AWSCluster default/demo: spec.region: immutable (was us-east-1, now us-west-2)" in message
    assert "AWSMachine default/demo-worker-0: spec.instanceType" in message
