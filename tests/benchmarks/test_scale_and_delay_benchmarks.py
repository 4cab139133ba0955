"""The scale and AWS-like delay benchmarks, run end to end with tiny parameters (one cluster, delays of a
second): the figures they print and write as JSON are all there and add up. No time is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import benchmarks.controller as controller_bench
import benchmarks.delays as delays_bench
import benchmarks.moto_env as moto_env
from tests.harness.moto_delays import Delays
from tests.harness.moto_server import MotoServer, start_moto_server

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
EXAMPLE_OBJECTS = 8  # Cluster, AWSCluster, 3 Machines, 3 AWSMachines (the Secret has no state)


def _run(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_scale_benchmark_measures_start_up_n_clusters_and_apply_one(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    # A safety limit, not a figure: the benchmark runs several capa processes and moto servers, which take
    # minutes when the machine is shared with other work.
    done = _run("scale.py", "--clusters", "1", "--repeat", "1", "--json", str(out), timeout=800)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert "error" not in figures

    startup = figures["startup"]
    assert startup["repeat"] == 1
    assert set(startup["firstCall"]) == {"capa", "minimal"}
    assert startup["firstCall"]["minimal"]["operation"] == "CreateVpc"  # minimal.py creates first
    assert startup["firstCall"]["capa"]["operation"]  # whatever capa asks first, it is named
    assert len(startup["processSeconds"]["import capa_app.cli.main"]["runs"]) == 1

    [one] = figures["clusters"]
    assert one["clusters"] == 1
    assert one["ready"] == one["objects"] == EXAMPLE_OBJECTS
    assert one["calls"]["total"] == sum(one["calls"]["byOperation"].values())
    assert one["calls"]["mutating"] == 51  # the minimum of figure 1: nothing created twice
    assert one["callsPerCluster"] == one["calls"]["total"]
    assert one["cpu"]["totalSeconds"] > 0
    assert one["peakRssKiB"] > 0
    assert one["reconciles"]["awscluster"] >= 1

    apply_one = figures["applyOne"]
    assert apply_one["stored"] == 1
    assert apply_one["cluster"] == "bench-001"  # the next copy: its own names and VPC range
    for side in ("intoStored", "intoEmpty"):
        assert apply_one[side]["calls"]["mutating"] == 51, side
        assert apply_one[side]["ready"] == apply_one[side]["objects"] == EXAMPLE_OBJECTS, side
    assert set(apply_one["ratio"]) == {"calls", "wall", "cpu"}

    for heading in (
        "A. Client start-up",
        "B. N clusters in one capa apply",
        "C. Applying one cluster's file",
    ):
        assert heading in done.stdout


@pytest.mark.slow
def test_the_delay_benchmark_reports_calls_time_to_ready_and_the_critical_path(tmp_path: Path) -> None:
    out = tmp_path / "delays.json"
    args = ("--nat-delay", "1", "--lb-delay", "2", "--instance-delay", "1", "--json", str(out))
    done = _run("delays.py", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(out.read_text())["delayRun"]

    assert run["delays"] == {"nat_gateway": 1.0, "load_balancer": 2.0, "instance": 1.0}
    assert run["capa"]["ready"] == run["capa"]["objects"] == EXAMPLE_OBJECTS
    assert run["capa"]["calls"]["mutating"] == 51
    assert run["criticalPath"]["longest"] == "load balancer"
    assert run["ratio"] == pytest.approx(run["timeToReadySeconds"] / run["criticalPath"]["seconds"], abs=0.01)
    created = run["createdAt"]
    assert [len(created[k]) for k in ("nat_gateway", "load_balancer", "instance")] == [3, 1, 3]
    assert run["readyAt"]["load_balancer"] == [pytest.approx(created["load_balancer"][0] + 2.0, abs=0.02)]
    assert run["capa4192"]["ec2:DescribeRouteTables"]["capaCluster1"] == 28
    by_operation = run["capa"]["calls"]["byOperation"]
    route_tables = run["capa4192"]["ec2:DescribeRouteTables"]
    assert route_tables["capaPy"] == by_operation.get("ec2:DescribeRouteTables", 0)
    assert route_tables["above"] == (route_tables["capaPy"] > 28)
    assert "time to Ready / critical path" in done.stdout


def test_the_critical_path_is_the_longest_chain_of_calls_and_waits() -> None:
    path = delays_bench.critical_path(Delays(), latency=0.01)
    assert path["longest"] == "load balancer"
    assert path["seconds"] == pytest.approx(150 + 3 * 0.01)
    assert path["chains"]["NAT gateway"]["seconds"] == pytest.approx(90 + 4 * 0.01)  # its route follows
    # With the instance slowest, its chain (and the registration after it) is the critical path.
    slow_instances = delays_bench.critical_path(Delays(instance=300), latency=0.01)
    assert slow_instances["longest"] == "instance"
    assert slow_instances["seconds"] == pytest.approx(300 + 4 * 0.01)


def test_calls_per_resync_spread_the_window_over_its_sync_periods() -> None:
    calls = {"total": 120, "mutating": 0, "byOperation": {"ec2:DescribeVpcs": 80, "ec2:DescribeSubnets": 40}}
    resync = controller_bench.per_resync(calls, window=120.0, sync_seconds=60.0, clusters=20)
    assert resync == {
        "resyncsInWindow": 2.0,
        "total": 60.0,
        "mutating": 0.0,
        "perCluster": 3.0,
        "byOperation": {"ec2:DescribeVpcs": 40.0, "ec2:DescribeSubnets": 20.0},
        "operations": 2,
    }
    assert controller_bench.per_resync(calls, window=120.0, sync_seconds=0.0, clusters=20) is None


@pytest.fixture(scope="module")
def plain_server() -> Iterator[MotoServer]:
    server = start_moto_server()
    yield server
    server.stop()


def test_the_inventory_tells_moto_s_leftover_interfaces_from_others(plain_server: MotoServer) -> None:
    plain_server.reset()
    env = moto_env.MotoEnv(plain_server)
    ec2 = env.ec2
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.1.0/24")["Subnet"]["SubnetId"]
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nats = [ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]["NatGatewayId"]]
    image = ec2.register_image(Name="inventory-node", RootDeviceName="/dev/sda1")["ImageId"]
    launched = ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, SubnetId=subnet)["Instances"]
    ec2.create_network_interface(SubnetId=subnet)  # nobody's: what a leak would look like

    before = env.network_interfaces()
    assert before["network interfaces of NAT gateways"] == 1
    assert before["network interfaces of instances"] == 2
    assert before["network interfaces, any other"] == 1

    ec2.delete_nat_gateway(NatGatewayId=nats[0])
    ec2.terminate_instances(InstanceIds=[launched[0]["InstanceId"]])
    after = env.network_interfaces()
    assert after == {
        "network interfaces of NAT gateways": 0,
        "network interfaces of instances": 1,
        moto_env.MOTO_NAT_INTERFACES: 1,
        moto_env.MOTO_INSTANCE_INTERFACES: 1,
        "network interfaces, any other": 1,
    }


def test_bad_options_are_refused() -> None:
    for script, args, message in (
        ("scale.py", ("--clusters", "0"), "--clusters must be between 1 and 255"),
        ("scale.py", ("--clusters", "a,b"), "comma-separated numbers"),
        ("delays.py", ("--scale", "-1"), "scale must not be negative"),
    ):
        done = _run(script, *args, timeout=60)
        assert done.returncode == 2, (script, args, done.stderr)
        assert message in done.stderr, (script, args, done.stderr)
