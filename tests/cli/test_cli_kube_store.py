"""The CLI on the kube store: ``--kubeconfig`` (or ``--store kube``) points ``get``, ``apply`` and ``delete``
at an API server — here ``capa serve --write-kubeconfig`` in a process of its own — and ``--wait`` waits for
the controllers running there (a stand-in here, writing status as ``capa controller`` would)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from capa_py.api import AWSCluster
from capa_py.engine.tags import STORE_TAG
from capa_py.runtime.leader import LeaderElector
from capa_py.store import retry_on_conflict
from capa_py.store.kube import KubeStore
from tests.cli.cli_support import Cli
from tests.cli.served import bare_kubeconfig, capa_serve
from tests.e2e.e2e_support import CLUSTER_TAG, MotoInspector
from tests.harness.moto_server import MotoServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aws-cluster-machines.yaml"
SAFETY_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig for ``capa serve`` running (for the whole module) over a SQLite file of its own."""
    with capa_serve(tmp_path_factory.mktemp("served")) as path:
        yield path


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own on the module's server."""
    return request.node.name.replace("_", "-")[:50].strip("-").lower()


def cluster_name(namespace: str) -> str:
    """A cluster name of the test's own (cluster names are unique per region across the store)."""
    return "c" + hashlib.sha1(namespace.encode()).hexdigest()[:8]


def manifest(tmp_path: Path, namespace: str, finalizers: list[str] | None = None) -> Path:
    doc = {
        "apiVersion": AWSCluster.API_VERSION,
        "kind": "AWSCluster",
        "metadata": {"name": cluster_name(namespace), "namespace": namespace, "finalizers": finalizers or []},
        "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
    }
    path = tmp_path / "awscluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class StandIn:
    """What the controllers at the API server would do to one AWSCluster, once it is there: mark it
    ready, or let its deletion finish by removing its finalizers."""

    def __init__(self, kubeconfig: Path, namespace: str, action: str) -> None:
        self.store = KubeStore.from_kubeconfig(kubeconfig)
        self.namespace, self.action = namespace, action
        self.stop = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for event in self.store.watch(AWSCluster, self.namespace, stop=self.stop, timeout=SAFETY_TIMEOUT):
            cluster = event.object
            if self.action == "ready" and not cluster.status.ready:
                retry_on_conflict(self.store, cluster, self._ready, status=True)
                self.done.set()
            if self.action == "finalize" and cluster.being_deleted and cluster.metadata.finalizers:
                retry_on_conflict(self.store, cluster, self._finalize)
                self.done.set()

    @staticmethod
    def _ready(cluster: AWSCluster) -> None:
        cluster.status.ready = True

    @staticmethod
    def _finalize(cluster: AWSCluster) -> None:
        cluster.metadata.finalizers = []

    def close(self) -> None:
        self.stop.set()
        self.thread.join(SAFETY_TIMEOUT)
        self.store.close()


def test_get_apply_and_delete_work_against_a_kubeconfig(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path, state: Path
) -> None:
    at = ("--kubeconfig", str(kubeconfig))

    applied = cli(*at, "apply", "-f", str(manifest(tmp_path, namespace)), "--no-wait")
    assert applied.exit_code == 0, str(applied)
    name = cluster_name(namespace)
    assert f"awscluster/{name} created" in applied.stdout, str(applied)

    listed = cli(*at, "get", "awsclusters", "-n", namespace, "-o", "json")
    assert listed.exit_code == 0, str(listed)
    assert [i["metadata"]["name"] for i in json.loads(listed.stdout)["items"]] == [name]

    deleted = cli(*at, "delete", "awscluster", name, "-n", namespace, "--no-wait")
    assert deleted.exit_code == 0, str(deleted)
    gone = cli(*at, "get", "awscluster", name, "-n", namespace)
    assert gone.exit_code == 1, str(gone)
    assert not state.exists(), "with --kubeconfig nothing may touch the SQLite store"


def test_kubeconfig_in_the_environment_selects_the_server_only_with_store_kube(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    stored = cli("--store", "kube", "apply", "-f", str(manifest(tmp_path, namespace)), "--no-wait")
    assert stored.exit_code == 0, str(stored)

    on_sqlite = cli("get", "awsclusters", "-n", namespace)
    assert "No store at" in on_sqlite.stderr, f"KUBECONFIG alone must not leave SQLite:\n{on_sqlite}"
    on_server = cli("--store", "kube", "get", "awsclusters", "-n", namespace)
    assert on_server.exit_code == 0, str(on_server)
    assert cluster_name(namespace) in on_server.stdout, str(on_server)


def test_a_kubeconfig_that_cannot_be_used_is_exit_2(cli: Cli, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    result = cli("--kubeconfig", str(broken), "get", "awsclusters")
    assert result.exit_code == 2, str(result)
    assert "kubeconfig" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_an_unreachable_server_is_exit_1(cli: Cli, tmp_path: Path, closed_endpoint: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(bare_kubeconfig(closed_endpoint)))
    result = cli("--kubeconfig", str(path), "get", "awsclusters")
    assert result.exit_code == 1, str(result)
    assert "does not answer" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_store_sqlite_with_a_kubeconfig_is_invalid(cli: Cli, kubeconfig: Path) -> None:
    result = cli("--store", "sqlite", "--kubeconfig", str(kubeconfig), "get", "awsclusters")
    assert result.exit_code == 2, str(result)


def test_apply_wait_waits_for_the_controllers_at_the_server(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    stand_in = StandIn(kubeconfig, namespace, "ready")
    try:
        result = cli(
            "--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest(tmp_path, namespace)), "-o", "json"
        )
    finally:
        stand_in.close()
    assert result.exit_code == 0, str(result)
    assert stand_in.done.is_set(), "apply returned before the object was made ready"
    document = json.loads(result.stdout)
    assert document["converged"] is True
    assert document["states"] == {f"AWSCluster {namespace}/{cluster_name(namespace)}": "ready"}
    assert document["awsCalls"] is None, "the AWS calls were made elsewhere: none are known here"
    assert document["reconciled"] is None, "the reconciles ran elsewhere: none are known here"


def test_apply_wait_with_nobody_reconciling_times_out_with_exit_1(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    result = cli(
        "--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest(tmp_path, namespace)), "--timeout", "1s"
    )
    assert result.exit_code == 1, str(result)
    assert "not ready after 1s" in result.stderr, str(result)


def test_delete_wait_waits_until_the_controllers_at_the_server_let_it_go(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    at = ("--kubeconfig", str(kubeconfig))
    held = manifest(tmp_path, namespace, finalizers=["awscluster.infrastructure.cluster.x-k8s.io"])
    assert cli(*at, "apply", "-f", str(held), "--no-wait").exit_code == 0
    stand_in = StandIn(kubeconfig, namespace, "finalize")
    try:
        result = cli(*at, "delete", "-f", str(held), "--wait", "--timeout", "60s")
    finally:
        stand_in.close()
    assert result.exit_code == 0, str(result)
    assert stand_in.done.is_set(), "delete returned before the finalizer was removed"
    gone = cli(*at, "get", "awscluster", cluster_name(namespace), "-n", namespace)
    assert gone.exit_code == 1, "the object must be gone"


def test_run_controllers_takes_the_store_lease_at_the_server(
    cli: Cli, kubeconfig: Path, namespace: str, tmp_path: Path, closed_endpoint: str
) -> None:
    holder = "capa controller pid 4242 on another-host (3fa2c1)"
    with KubeStore.from_kubeconfig(kubeconfig) as store:
        elector = LeaderElector(store, holder)
        elector.acquire(wait=False)
        try:
            result = cli(
                *("--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest(tmp_path, namespace))),
                *(
                    "--run-controllers",
                    "--aws-endpoint",
                    closed_endpoint,
                    "--no-wait-for-lock",
                    "--timeout",
                    "5s",
                ),
            )
        finally:
            elector.release()
    assert result.exit_code == 1, str(result)
    assert holder in result.stderr, f"the in-process run must meet the lease held at the server:\n{result}"


def test_serve_refuses_to_serve_an_api_server(cli: Cli, kubeconfig: Path) -> None:
    result = cli("--kubeconfig", str(kubeconfig), "serve", "--port", "0")
    assert result.exit_code == 2, str(result)
    assert "serves the SQLite store" in result.stderr, str(result)


def test_run_controllers_converges_and_tears_down_the_example_through_the_api_server(
    cli: Cli, kubeconfig: Path, cli_moto: MotoServer
) -> None:
    cli_moto.reset()
    at = ("--kubeconfig", str(kubeconfig))
    aws = ("--run-controllers", "--aws-endpoint", cli_moto.url, "--timeout", "3m")
    inspector = MotoInspector(cli_moto.url)
    try:
        applied = cli(*at, "apply", "-f", str(EXAMPLE), *aws, "-o", "json")
        assert applied.exit_code == 0, str(applied)
        assert json.loads(applied.stdout)["converged"] is True
        vpcs = inspector.ec2.describe_vpcs(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": ["owned"]}])
        tags = [{t["Key"]: t["Value"] for t in v.get("Tags", [])} for v in vpcs["Vpcs"]]
        with KubeStore.from_kubeconfig(kubeconfig) as store:
            assert [t.get(STORE_TAG) for t in tags] == [store.uid], (
                "the VPC must carry the identity of the store the server serves"
            )

        deleted = cli(*at, "delete", "-f", str(EXAMPLE), "--wait", *aws)
        assert deleted.exit_code == 0, str(deleted)
        left = {kind: ids for kind, ids in inspector.inventory().tagged.items() if ids}
        assert left == {}, f"the delete left AWS resources behind: {left}"
    finally:
        inspector.close()
