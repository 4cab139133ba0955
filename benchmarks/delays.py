"""capa-py benchmark: the example cluster against a moto server that takes AWS's time.

    .venv/bin/python -m benchmarks.delays [--nat-delay 90] [--lb-delay 150] [--instance-delay 45]
                                          [--scale 1] [--quick] [--json PATH]

Starts one moto server through the delay harness (``tests/harness/moto_delays.py``: NAT gateways pending
90 s after their creation, the load balancer provisioning 150 s, instances pending 45 s, by default) and
runs ``capa apply`` of the example on it, once. It reports the AWS calls by operation, the time to Ready,
the critical path — the longest chain of dependent calls and waits any client must go through — and
their ratio; when capa created each slow resource (read back from the server afterwards, uncounted);
and capa's describe counts next to those Cluster API Provider AWS spent over a test cluster's whole life
in its issue #4192. Nothing asserts a time. Exit status 0, or 1 when the command fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run by its path: the repository's root makes `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.moto_env import MotoEnv
from benchmarks.run import (
    DEFAULT_MANIFEST,
    CommandFailed,
    calls_table,
    command_failed,
    environment,
    finish,
    key_values,
    section,
    table,
)
from benchmarks.scale import Capa
from tests.harness.moto_delays import Delays, add_delay_options

LATENCY_SAMPLES = 10

CHAINS: dict[str, tuple[list[str], str, list[str]]] = {
    "load balancer": (["ec2:CreateVpc", "ec2:CreateSubnet", "elbv2:CreateLoadBalancer"], "load_balancer", []),
    "NAT gateway": (
        ["ec2:CreateVpc", "ec2:CreateSubnet", "ec2:CreateNatGateway"],
        "nat_gateway",
        ["ec2:CreateRoute"],
    ),
    "instance": (
        ["ec2:CreateVpc", "ec2:CreateSubnet", "ec2:RunInstances"],
        "instance",
        ["elbv2:RegisterTargets"],
    ),
}
"""For each slow resource: the dependent calls before it (what can run in parallel — the elastic IP, the
security groups, the other subnets — is not on the chain), the wait, and the calls that must follow it."""

CAPA_4192: dict[str, tuple[int, int]] = {
    "ec2:DescribeSubnets": (20, 19),
    "ec2:DescribeRouteTables": (28, 26),
    "ec2:DescribeVpcAttribute": (28, 26),
    "elbv2:DescribeLoadBalancers": (41, 32),
    "ec2:DescribeNetworkInterfaces": (53, 34),
    "ec2:DescribeNatGateways": (54, 50),
    "ec2:DescribeInstances": (64, 44),
}
"""Calls Cluster API Provider AWS made over the whole life of two test clusters of one control-plane and
one worker machine each, as counted from CloudTrail in kubernetes-sigs/cluster-api-provider-aws#4192."""


def progress(message: str) -> None:
    print(f"[delays] {message}", file=sys.stderr, flush=True)


def call_latency(env: MotoEnv) -> float:
    """Mean seconds of one create call on this server (``CreateVpc``, sequential), then a reset."""
    env.reset()
    started = time.perf_counter()
    for i in range(LATENCY_SAMPLES):
        env.ec2.create_vpc(CidrBlock=f"10.{200 + i}.0.0/16")
    seconds = (time.perf_counter() - started) / LATENCY_SAMPLES
    env.reset()
    return seconds


def critical_path(delays: Delays, latency: float) -> dict[str, Any]:
    chains: dict[str, dict[str, Any]] = {}
    for name, (before, kind, after) in CHAINS.items():
        calls = len(before) + len(after)
        chains[name] = {
            "callsBefore": before,
            "callsAfter": after,
            "callSeconds": round(calls * latency, 3),
            "waitSeconds": delays.seconds(kind),
            "seconds": round(calls * latency + delays.seconds(kind), 3),
        }
    longest = max(chains, key=lambda n: float(chains[n]["seconds"]))
    return {"chains": chains, "longest": longest, "seconds": chains[longest]["seconds"]}


def slow_resources(env: MotoEnv, started_at: float) -> dict[str, list[float]]:
    """Seconds from the capa process's start to the creation of each NAT gateway, load balancer and
    instance, as the server recorded it (uncounted reads)."""
    nats = env.ec2.describe_nat_gateways()["NatGateways"]
    lbs = env.elbv2.describe_load_balancers()["LoadBalancers"]
    instances = [i for r in env.ec2.describe_instances()["Reservations"] for i in r["Instances"]]

    def offsets(times: list[Any]) -> list[float]:
        return sorted(round(t.timestamp() - started_at, 2) for t in times)

    return {
        "nat_gateway": offsets([n["CreateTime"] for n in nats]),
        "load_balancer": offsets([lb["CreatedTime"] for lb in lbs]),
        "instance": offsets([i["LaunchTime"] for i in instances]),
    }


def measure(env: MotoEnv, capa: Capa, manifest: Path, delays: Delays, work: Path) -> dict[str, Any]:
    progress(f"measuring the server's call latency ({LATENCY_SAMPLES} CreateVpc)")
    latency = call_latency(env)
    path = critical_path(delays, latency)
    longest_wait = max(delays.as_dict().values())
    progress(f"capa apply of {manifest.name} (at least {path['seconds']:.0f} s, the critical path)")
    state = work / "state.db"
    started_at = time.time()
    run = capa.apply("capa apply (AWS-like delays)", state, manifest)
    created = slow_resources(env, started_at)
    ready_at = {
        kind: [round(t + delays.seconds(kind), 2) for t in times] for kind, times in created.items() if times
    }
    last_kind = max(ready_at, key=lambda k: max(ready_at[k])) if ready_at else None
    converge = run["convergeSeconds"]
    return {
        "delays": delays.as_dict(),
        "callLatencySeconds": round(latency, 4),
        "criticalPath": path,
        "capa": run,
        "timeToReadySeconds": converge,
        "ratio": round(converge / path["seconds"], 3) if converge and path["seconds"] else None,
        "createdAt": created,
        "readyAt": ready_at,
        "lastReady": {"kind": last_kind, "at": max(ready_at[last_kind]) if last_kind else None},
        "longestWaitSeconds": longest_wait,
        "capa4192": {
            op: {
                "capaPy": run["calls"]["byOperation"].get(op, 0),
                "capaCluster1": c1,
                "capaCluster2": c2,
                "above": run["calls"]["byOperation"].get(op, 0) > c1,
            }
            for op, (c1, c2) in CAPA_4192.items()
        },
    }


KIND_NAMES = {"nat_gateway": "NAT gateways", "load_balancer": "load balancer", "instance": "instances"}


def report(figures: dict[str, Any]) -> None:
    run = figures["capa"]
    calls = run["calls"]
    delays = figures["delays"]
    section(
        f"E. The example cluster with AWS-like delays: NAT gateways {delays['nat_gateway']:g} s, "
        f"load balancer {delays['load_balancer']:g} s, instances {delays['instance']:g} s"
    )
    print(calls_table({"calls": calls["byOperation"]}))
    print()
    path = figures["criticalPath"]
    rows = [
        [
            name,
            " > ".join(op.split(":")[1] for op in chain["callsBefore"]),
            f"{chain['waitSeconds']:g}",
            " > ".join(op.split(":")[1] for op in chain["callsAfter"]) or "-",
            f"{chain['seconds']:.2f}",
        ]
        for name, chain in path["chains"].items()
    ]
    print("Dependency chains (calls at the server's measured latency, "
          f"{1000 * figures['callLatencySeconds']:.1f} ms a call):")  # fmt: skip
    print(table(["slow resource", "calls before", "wait s", "calls after", "chain s"], rows, align="llrlr"))
    ready = run["ready"] == run["objects"]
    print()
    print(
        key_values(
            [
                ("AWS calls", f"{calls['total']} ({calls['mutating']} mutating)"),
                (
                    "capa objects ready",
                    f"{run['ready']}/{run['objects']}" + ("" if ready else "  NOT ALL READY"),
                ),
                ("time to Ready (capa's converge)", f"{figures['timeToReadySeconds']:.1f} s"),
                ("critical path", f"{path['seconds']:.2f} s (the {path['longest']} chain)"),
                (
                    "time to Ready / critical path",
                    (f"{figures['ratio']:.2f}x" if figures["ratio"] else "-")
                    + " (the target: at most 1.05x with 20/30/10 s delays)",
                ),
                ("whole capa apply command", f"{run['wallSeconds']:.1f} s"),
                ("capa CPU", f"{run['cpu']['totalSeconds']:.1f} s"),
            ]
        )
    )
    print()
    print("When capa created the slow resources (seconds after its process started; read from the server):")
    rows = [
        [KIND_NAMES[kind], ", ".join(f"{t:.1f}" for t in times),
         ", ".join(f"{t:.1f}" for t in figures["readyAt"].get(kind, []))]
        for kind, times in figures["createdAt"].items()
    ]  # fmt: skip
    print(table(["", "created at", "ready at"], rows, align="lll"))
    last = figures["lastReady"]
    if last["kind"]:
        print(
            f"  the last to become ready: the {KIND_NAMES[last['kind']]} at {last['at']:.1f} s; capa apply "
            f"returned at {run['wallSeconds']:.1f} s"
        )
    print()
    print(
        "Describe calls next to Cluster API Provider AWS's over a test cluster's whole life (its issue #4192,"
    )
    print("CloudTrail counts for two clusters of one control plane and one worker; this one has 3 machines):")
    rows = [
        [
            op,
            c["capaPy"],
            c["capaCluster1"],
            c["capaCluster2"],
            "above" if c["above"] else "",
        ]
        for op, c in figures["capa4192"].items()
    ]
    print(
        table(["operation", "capa-py, create", "CAPA cluster 1", "CAPA cluster 2", ""], rows, align="lrrrl")
    )
    above = [op.split(":")[1] for op, c in figures["capa4192"].items() if c["above"]]
    print(f"  above CAPA's whole-lifetime count (the issue's target: none): {', '.join(above) or 'none'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_delay_options(parser)
    parser.add_argument("--scale", type=float, default=None, help="multiplies every delay (default 1)")
    parser.add_argument("--quick", action="store_true", help="the delays ten times shorter (--scale 0.1)")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="default: the example")
    parser.add_argument("--capa-timeout", default="30m", help="--timeout of capa apply (default 30m)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)  # fmt: skip
    scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    try:
        args.delays = Delays(args.nat_delay, args.lb_delay, args.instance_delay, scale)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    figures: dict[str, Any] = {"environment": environment(manifest=str(args.manifest.resolve()))}
    status = 0
    progress("starting a moto server with AWS-like delays on 127.0.0.1")
    env = MotoEnv.start(delays=args.delays)
    try:
        print("capa-py benchmark with AWS-like delays")
        print(f"  one moto server on {env.url} through tests/harness/moto_delays.py")
        with tempfile.TemporaryDirectory(prefix="capa-delays-") as tmp:
            figures["delayRun"] = measure(
                env, Capa(env.url, args.capa_timeout), args.manifest.resolve(), args.delays, Path(tmp)
            )
        report(figures["delayRun"])
    except CommandFailed as exc:
        status = command_failed(exc, figures)
    finally:
        env.stop()
    return finish("delay benchmark", "delays", figures, time.perf_counter() - started, status, args.json)


if __name__ == "__main__":
    sys.exit(main())
