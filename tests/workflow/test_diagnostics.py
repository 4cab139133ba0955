"""The error handler's bundle: the failure, a real SQLite store's objects, conditions and Events, the AWS
calls the run made against moto, the run's log lines — and no secret value anywhere in it."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest

from capa_py.api.cluster import Cluster
from capa_py.api.conditions import mark_false
from capa_py.api.core import Event, Secret
from capa_py.api.meta import ObjectMeta
from capa_py.api.registry import KindRegistry
from capa_py.api.tinkerbell import DHCP, Hardware, HardwareSpec, Instance, NetworkInterface
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy
from capa_py.logging import get_logger
from capa_py.store.sqlite import SQLiteStore
from capa_py.workflow import (
    AWSCallCollector,
    Context,
    ErrorHandler,
    LogCollector,
    StoreCollector,
    Workflow,
    hook_point,
    run_workflow,
    task,
)
from tests.harness.moto_server import MotoServer, start_moto_server

SECRET_VALUE = "hunter2-do-not-leak"
USER_DATA = "#cloud-config\npassword: very-private"
log = get_logger("test.workflow")


@pytest.fixture(autouse=True)
def _no_developer_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto_server()
    yield server
    server.stop()


@dataclass
class BundleContext(Context):
    aws: AWSClients


@task("Create Network")
def create_network(ctx: BundleContext) -> None:
    """Runs first; assumes an empty account. Creates a VPC and logs with a secret-named key."""
    ctx.aws.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    log.info("network created", token=SECRET_VALUE, cidr="10.0.0.0/16")


@task("Create Instance")
def create_instance(ctx: BundleContext) -> None:
    """Runs after Create Network; fails as an instance launch would, after looking the VPC up."""
    ctx.aws.ec2.call("DescribeVpcs")
    raise RuntimeError("no capacity for t3.micro")


def _populate(store: SQLiteStore) -> None:
    cluster = store.create(Cluster(metadata=ObjectMeta(name="demo", namespace="default")))
    mark_false(cluster.status, "InfrastructureReady", "WaitingForVPC", "the VPC is not available yet")
    store.update_status(cluster)
    encoded = base64.b64encode(SECRET_VALUE.encode()).decode()
    store.create(
        Secret(metadata=ObjectMeta(name="demo-kubeconfig", namespace="default"), data={"value": encoded})
    )
    store.create(
        Hardware(
            metadata=ObjectMeta(name="hw-1", namespace="default"),
            spec=HardwareSpec(
                network_interfaces={
                    "aa:bb:cc:dd:ee:ff": NetworkInterface(dhcp=DHCP(ip="10.0.0.5", netmask="255.255.255.0"))
                },
                instance=Instance(userdata=USER_DATA, vendordata="vendor-private"),
            ),
        )
    )
    store.create(
        Event(
            metadata=ObjectMeta(name="demo.1", namespace="default"),
            reason="WaitingForVPC",
            message="waiting for the VPC",
            type="Normal",
        )
    )


def test_a_failure_writes_a_bundle_with_store_aws_calls_and_logs_but_no_secrets(
    tmp_path: Path, moto: MotoServer
) -> None:
    moto.reset()
    store = SQLiteStore(tmp_path / "state.db")
    _populate(store)
    aws = AWSClients(
        AWSSettings(endpoint_url=moto.url, retry=RetryPolicy(attempts=2, initial_delay=0.01)),
        RateLimiter(enabled=False),
    )
    handler = ErrorHandler(
        [
            StoreCollector(store, [Cluster, Secret, Hardware], namespace="default"),
            AWSCallCollector(),
            LogCollector(),
        ],
        directory=tmp_path / "bundles",
    )
    pre = hook_point("Pre Create", "Runs first; executes pre hooks.", BundleContext)
    workflow = Workflow(
        "bundle", BundleContext, [pre, create_network, create_instance], error_handler=handler
    )
    result = run_workflow(
        workflow, BundleContext(aws=aws), workflow_id="bundle-1", state_dir=tmp_path / "state"
    )

    assert not result.succeeded
    assert result.bundle is not None
    assert result.bundle.parent == tmp_path / "bundles"
    assert result.bundle.name.startswith("bundle-1-")
    assert sorted(p.name for p in result.bundle.iterdir()) == [
        "aws-calls.json",
        "failure.json",
        "log.json",
        "store.json",
    ]
    failure = json.loads((result.bundle / "failure.json").read_text())
    assert failure["task"] == "Create Instance"
    assert failure["message"] == "no capacity for t3.micro"

    dumped = json.loads((result.bundle / "store.json").read_text())
    by_kind = {(o["kind"], o["metadata"]["name"]) for o in dumped["objects"]}
    assert by_kind == {("Cluster", "demo"), ("Secret", "demo-kubeconfig"), ("Hardware", "hw-1")}
    assert {(c["object"], c["type"], c["reason"]) for c in dumped["conditions"]} == {
        ("Cluster default/demo", "InfrastructureReady", "WaitingForVPC")
    }
    assert [(e["reason"], e["message"]) for e in dumped["events"]] == [
        ("WaitingForVPC", "waiting for the VPC")
    ]
    secret = next(o for o in dumped["objects"] if o["kind"] == "Secret")
    assert secret["dataKeys"] == ["value"]

    calls = json.loads((result.bundle / "aws-calls.json").read_text())
    assert calls["byOperation"] == {"ec2:CreateVpc": 1, "ec2:DescribeVpcs": 1}
    assert calls["mutating"] == {"ec2:CreateVpc": 1}

    lines = json.loads((result.bundle / "log.json").read_text())
    events = [(line.get("event"), line.get("task")) for line in lines]
    assert ("task started", "Create Network") in events
    assert ("task failed", "Create Instance") in events
    created = next(line for line in lines if line.get("event") == "network created")
    assert created["cidr"] == "10.0.0.0/16"
    assert created["token"] == "**redacted**"

    everything = "".join(p.read_text() for p in result.bundle.iterdir())
    for value in (
        SECRET_VALUE,
        base64.b64encode(SECRET_VALUE.encode()).decode(),
        "very-private",
        "vendor-private",
    ):
        assert value not in everything, f"{value!r} leaked into the bundle"
    store.close()


def test_the_log_collector_leaves_the_console_at_its_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import structlog

    from capa_py.logging import configure_logging

    saved = structlog.get_config()
    configure_logging("json", verbosity=0)
    try:
        collector = LogCollector()
        with collector.recording():
            log.info("quiet detail", step=1)
            log.warning("loud problem", step=2)
        log.info("after the run", step=3)
    finally:
        # Leave structlog as it was: a level filter left behind hides later tests' captured logs.
        structlog.configure(**saved)
    assert [line["event"] for line in collector.lines] == ["quiet detail", "loud problem"]
    printed = capsys.readouterr().err
    assert "loud problem" in printed
    assert "quiet detail" not in printed
    assert "after the run" not in printed


def test_a_kind_the_store_cannot_list_is_noted_and_the_rest_still_written(tmp_path: Path) -> None:
    registry = KindRegistry()
    for kind in (Cluster, Event):
        registry.register(kind)
    store = SQLiteStore(tmp_path / "state.db", registry=registry)
    store.create(Cluster(metadata=ObjectMeta(name="demo", namespace="default")))
    part = StoreCollector(store, [Cluster, Hardware]).collect()
    assert isinstance(part, dict)
    assert [o["metadata"]["name"] for o in part["objects"]] == ["demo"]
    assert len(part["errors"]) == 1
    assert part["errors"][0].startswith("Hardware: Invalid:")
    store.close()


def test_a_broken_collector_leaves_its_error_in_the_bundle(tmp_path: Path) -> None:
    class Broken:
        name = "broken"

        def recording(self) -> AbstractContextManager[object]:
            return contextlib.nullcontext()

        def collect(self) -> object:
            raise OSError("disk unreadable")

    @task("Fail")
    def fail(ctx: Context) -> None:
        """Runs first; always raises."""
        raise RuntimeError("broken on purpose")

    handler = ErrorHandler([Broken(), AWSCallCollector()])
    workflow = Workflow("broken", Context, [fail], error_handler=handler)
    result = run_workflow(workflow, Context(), workflow_id="b", state_dir=tmp_path)
    assert result.bundle is not None
    assert json.loads((result.bundle / "broken.json").read_text()) == {"error": "OSError: disk unreadable"}
    assert json.loads((result.bundle / "aws-calls.json").read_text())["total"] == 0
