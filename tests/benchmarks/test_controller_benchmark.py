"""The controller benchmark's pieces that need no server: its manifest of N clusters, its figures from two
metric readings, and its command line."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
import yaml

import benchmarks.controller as bench
from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifest_text

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "controller.py"


def test_the_manifest_holds_n_valid_clusters_with_their_own_names_and_ranges() -> None:
    objects = load_manifest_text(bench.cluster_manifest(20), "generated")  # the loader's full validation

    clusters = [o for o in objects if isinstance(o, Cluster)]
    aws = {o.metadata.name: o for o in objects if isinstance(o, AWSCluster)}
    machines = [o for o in objects if isinstance(o, Machine)]
    aws_machines = {o.metadata.name for o in objects if isinstance(o, AWSMachine)}
    secrets = {o.metadata.name for o in objects if isinstance(o, Secret)}
    assert len(clusters) == 20
    assert len({c.metadata.name for c in clusters}) == 20
    assert set(aws) == {c.metadata.name for c in clusters}
    assert len(machines) == len(aws_machines) == 60  # the example's three machines, for each cluster
    assert len(secrets) == 20
    for cluster in clusters:
        assert cluster.spec.infrastructure_ref is not None
        assert cluster.spec.infrastructure_ref.name == cluster.metadata.name
    for machine in machines:
        assert machine.spec.cluster_name in aws
        assert machine.metadata.labels["cluster.x-k8s.io/cluster-name"] == machine.spec.cluster_name
        assert machine.spec.infrastructure_ref.name in aws_machines
        assert machine.spec.infrastructure_ref.name.startswith(f"{machine.spec.cluster_name}-")
        assert machine.spec.bootstrap.data_secret_name in secrets

    vpcs = []
    for cluster in aws.values():
        vpc = ipaddress.IPv4Network(cluster.spec.network.vpc.cidr_block)
        subnets = [ipaddress.IPv4Network(s.cidr_block) for s in cluster.spec.network.subnets]
        assert len(subnets) == 6
        assert all(s.subnet_of(vpc) for s in subnets), cluster.metadata.name
        assert not any(a.overlaps(b) for a, b in combinations(subnets, 2)), cluster.metadata.name
        vpcs.append(vpc)
    assert not [(a, b) for a, b in combinations(vpcs, 2) if a.overlaps(b)]


def test_as_many_clusters_as_the_private_block_holds_and_no_more() -> None:
    assert bench.max_clusters() == 256  # /16 VPCs of the example in 10.0.0.0/8
    last = [d for d in yaml.safe_load_all(bench.cluster_manifest(256)) if d["kind"] == "AWSCluster"][-1]
    assert last["metadata"]["name"] == "bench-255"
    assert last["spec"]["network"]["vpc"]["cidrBlock"] == "10.255.0.0/16"
    for count in (0, 257):
        with pytest.raises(ValueError, match="between 1 and 256"):
            bench.cluster_manifest(count)


def test_figures_are_the_differences_between_two_readings() -> None:
    old = bench.Scrape(
        0.0,
        {("awscluster", "success"): 5.0},
        {"ec2:CreateVpc": 1.0, "ec2:DescribeVpcs": 4.0},
        {},
    )
    new = bench.Scrape(
        60.0,
        {("awscluster", "success"): 9.0, ("awsmachine", "requeue_after"): 2.0},
        {"ec2:CreateVpc": 1.0, "ec2:DescribeVpcs": 10.0, "ec2:RunInstances": 3.0},
        {"InvalidVpcID.NotFound": 1.0},
    )
    assert bench.calls_figures(new, old) == {
        "total": 9,
        "mutating": 3,
        "byOperation": {"ec2:DescribeVpcs": 6, "ec2:RunInstances": 3},
        "errors": {"InvalidVpcID.NotFound": 1},
    }
    assert bench.reconcile_figures(new, old) == {
        "awscluster": {"success": 4},
        "awsmachine": {"requeue_after": 2},
    }


def test_mean_times_are_those_of_the_observations_between_two_readings() -> None:
    old = bench.Scrape(
        0.0,
        {},
        {},
        {},
        {"reconcile:awscluster": 2.0, "aws": 1.0},
        {"reconcile:awscluster": 4.0, "aws": 100.0},
    )
    new = bench.Scrape(
        60.0,
        {},
        {},
        {},
        {"reconcile:awscluster": 5.0, "queue:awscluster": 0.5, "aws": 1.0},
        {"reconcile:awscluster": 10.0, "queue:awscluster": 10.0, "aws": 100.0},
    )
    assert bench.timing_figures(new, old) == {
        "byController": {"awscluster": {"reconcileSecondsMean": 0.5, "queueWaitSecondsMean": 0.05}},
        "awsRequestSecondsMean": None,  # no request between the readings
    }


def test_help_and_a_refused_option() -> None:
    shown = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    for option in ("--clusters", "--sync-period", "--window", "--settle", "--store", "--json"):
        assert option in shown.stdout
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--clusters", "0,257"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert "--clusters must be counts between 0 and 256, separated by commas: '0,257'" in refused.stderr


def test_cluster_counts_are_a_list_run_in_turn() -> None:
    assert bench.parse_args([]).counts == [0, 20, 200], "make bench runs 0, 20 and 200 clusters"
    assert bench.parse_args(["--clusters", "5"]).counts == [5]
    assert bench.cluster_counts("0,20,200", 256) == [0, 20, 200]
    for text in ("", "20,", "a", "-1", "257"):
        with pytest.raises(ValueError, match="between 0 and 256"):
            bench.cluster_counts(text, 256)


def test_controller_cpu_per_resync_is_the_windows_over_its_sync_periods() -> None:
    cpu = {"controller": {"cpuSeconds": 12.0, "coreShare": 0.1}}
    assert bench.cpu_per_resync(cpu, window=120.0, sync_seconds=60.0) == 6.0
    assert bench.cpu_per_resync(cpu, window=120.0, sync_seconds=0.0) is None
    assert bench.cpu_per_resync({}, window=120.0, sync_seconds=60.0) is None


def test_resync_bursts_are_the_calls_between_quiet_gaps_and_edges_are_partial() -> None:
    # Readings once a second: calls in seconds 1-2 (cut by the window's start), 20-22 and 40-41 (complete),
    # 59-60 (cut by its end).
    made = {1: 4, 2: 3, 20: 10, 21: 5, 22: 2, 40: 12, 41: 5, 60: 7}
    samples, total = [], 0.0
    for second in range(61):
        total += made.get(second, 0)
        samples.append((float(second), total))
    bursts = bench.call_bursts(samples, gap=bench.quiet_gap(20.0))
    assert [(b.calls, b.complete) for b in bursts] == [(7, False), (17, True), (17, True), (7, False)]
    figures = bench.burst_figures(bursts, clusters=2)
    assert figures["callsPerBurst"] == [17, 17]
    assert figures["meanCalls"] == 17.0
    assert figures["perCluster"] == 8.5
    assert figures["partialCalls"] == [7, 7]
    assert bench.burst_figures([], clusters=2)["meanCalls"] is None
