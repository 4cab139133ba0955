"""Controller mode end to end: ``capa serve`` + two ``capa controller --leader-elect`` + a moto server.

The README's "Run in a management cluster" flow, as processes: the store is served over the Kubernetes API,
the CRDs and the quick start's example (a MachineDeployment's workers) are applied through it (with kubectl
where it is on PATH, else with ``capa --kubeconfig``), and two leader-electing controllers reconcile through
the ``kube`` store. The leader is SIGKILLed in the middle of the create: the other one takes the Lease over
once its duration has passed and the cluster converges with exactly one of every AWS resource and no orphan.
Metrics are scraped and parsed with prometheus-client's parser; ``/readyz`` answers 200 once the informers
have synced. Deleting the objects then leaves nothing in AWS.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capa_py.aws.accounting import is_mutating
from tests.e2e.e2e_support import (
    QUICK_START,
    ROOT,
    MotoInspector,
    capa_env,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
    wait_for,
)

pytestmark = pytest.mark.slow

LEASE_SECONDS = 4
KUBECTL = shutil.which("kubectl")


class Background:
    """A long-running ``capa`` subprocess whose stdout lines are collected as they come."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.log = cwd / f"{name}.stderr"
        self._stderr = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "capa_app.cli", *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    found = compiled.search(line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.name} never printed /{pattern}/:\n{self.report()}")
                self._changed.wait(min(left, 0.5))

    def report(self) -> str:
        self._stderr.flush()
        err = self.log.read_text()[-4000:] if self.log.exists() else ""
        return f"--- {self.name} stdout ---\n" + "\n".join(self.lines[-40:]) + f"\n--- stderr ---\n{err}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()
        return self.process.returncode


def scrape(url: str) -> dict[str, float]:
    """``{"name{label=value,…}": value}`` of every sample, parsed with prometheus-client's parser."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def mutating_calls(samples: dict[str, float]) -> float:
    total = 0.0
    for key, value in samples.items():
        if key.startswith("aws_api_requests_total{"):
            operation = re.search(r"operation=([^,}]+)", key)
            if operation and is_mutating(operation.group(1)):
                total += value
    return total


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def processes() -> Iterator[list[Background]]:
    started: list[Background] = []
    yield started
    for process in started:
        process.stop(signal.SIGKILL, timeout=10)


def run(args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 240.0) -> str:
    completed = subprocess.run(
        list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )
    assert completed.returncode == 0, (
        f"$ {' '.join(args)}\nexit {completed.returncode}\n"
        f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def test_two_leader_electing_controllers_converge_through_capa_serve_and_survive_the_leaders_sigkill(
    workdir: Path, endpoint: str, inspector: MotoInspector, processes: list[Background]
) -> None:
    env = capa_env(workdir / "home")
    kubeconfig = workdir / "capa.kubeconfig"
    capa = [sys.executable, "-m", "capa_app.cli"]
    baseline = inspector.inventory().counts("total")

    serve = Background(
        "serve",
        ["--state", str(workdir / "state.db"), "serve", "--port", "0", "--write-kubeconfig", str(kubeconfig)],
        env,
        workdir,
    )
    processes.append(serve)
    serve.wait_for_line(r"kubeconfig written to")
    client_env = {**env, "KUBECONFIG": str(kubeconfig)}

    crds = workdir / "crds.yaml"
    crds.write_text(run([*capa, "manifests", "crds"], env, ROOT))
    if KUBECTL:
        run([KUBECTL, "apply", "-f", str(crds)], client_env, workdir)
    else:
        run([*capa, "--kubeconfig", str(kubeconfig), "apply", "-f", str(crds), "--no-wait"], env, workdir)

    controllers = []
    for name in ("controller-a", "controller-b"):
        controller = Background(
            name,
            [
                "--kubeconfig", str(kubeconfig), "controller", "--leader-elect",
                "--leader-elect-lease-duration", f"{LEASE_SECONDS}s",
                "--aws-endpoint", endpoint,
                "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
            ],
            env,
            workdir,
        )  # fmt: skip
        processes.append(controller)
        controllers.append(controller)
    metrics = {c.name: c.wait_for_line(r"metrics: (http://\S+/metrics)").group(1) for c in controllers}
    probes = {c.name: c.wait_for_line(r"health probes: (http://\S+)/healthz").group(1) for c in controllers}
    for controller in controllers:
        assert wait_for(lambda c=controller: http_status(probes[c.name] + "/readyz") == 200, timeout=30), (
            f"{controller.name}: /readyz never passed\n{controller.report()}"
        )
    assert wait_for(lambda: any("leading:" in line for c in controllers for line in c.lines), timeout=30)
    leader = next(c for c in controllers if any("leading:" in line for line in c.lines))
    follower = next(c for c in controllers if c is not leader)
    assert not any("leading:" in line for line in follower.lines), "two leaders at once"

    if KUBECTL:
        run([KUBECTL, "apply", "-f", str(QUICK_START)], client_env, workdir)
    else:
        run(
            [*capa, "--kubeconfig", str(kubeconfig), "apply", "-f", str(QUICK_START), "--no-wait"],
            env,
            workdir,
        )

    # Kill the leader in the middle of the create: after a third of the mutating calls the example needs.
    expected = expected_counts(QUICK_START)
    needed = sum(expected.values())
    assert wait_for(
        lambda: mutating_calls(scrape(metrics[leader.name])) >= needed / 3, timeout=60, interval=0.02
    ), f"the leader made no progress\n{leader.report()}"
    leader.stop(signal.SIGKILL)
    follower.wait_for_line(r"leading:", timeout=LEASE_SECONDS * 4 + 30)

    if KUBECTL:
        run(
            [KUBECTL, "wait", "--for=condition=Ready", "awscluster/demo", "cluster/demo", "--timeout=180s"],
            client_env,
            workdir,
            timeout=200,
        )
    else:
        run(
            [*capa, "--kubeconfig", str(kubeconfig), "apply", "-f", str(QUICK_START), "--timeout", "3m"],
            env,
            workdir,
        )

    def machines_ready() -> bool:
        machines = _objects(capa, env, workdir, kubeconfig, "awsmachines")
        ready = [o for o in machines if o.get("status", {}).get("ready")]
        return len(ready) == len(machines) == expected["instance"]  # the deployment's clones included

    assert wait_for(machines_ready, timeout=120), "the AWSMachines did not become ready after the takeover"

    objects = [
        *_objects(capa, env, workdir, kubeconfig, "awsclusters"),
        *_objects(capa, env, workdir, kubeconfig, "awsmachines"),
    ]
    problems = problems_with_cluster(inspector.inventory(), expected, baseline, recorded_ids(objects))
    assert not problems, "\n".join(problems)

    samples = scrape(metrics[follower.name])
    reconciles = sum(v for k, v in samples.items() if k.startswith("controller_runtime_reconcile_total{"))
    aws_calls = sum(v for k, v in samples.items() if k.startswith("aws_api_requests_total{"))
    assert reconciles > 0, samples
    assert aws_calls > 0, samples
    assert samples.get("leader_election_master_status{name=capa-py-controller}") == 1.0, samples

    if KUBECTL:
        run(
            [KUBECTL, "delete", "-f", str(QUICK_START), "--wait", "--timeout=180s"],
            client_env,
            workdir,
            timeout=200,
        )
    else:
        run(
            [*capa, "--kubeconfig", str(kubeconfig), "delete", "-f", str(QUICK_START), "--timeout", "3m"],
            env,
            workdir,
        )
    left = inspector.inventory().counts("tagged")
    assert not any(left.values()), f"left in AWS after the delete: {left}"

    assert follower.stop(signal.SIGTERM) == 0, follower.report()
    assert serve.stop(signal.SIGTERM) == 0, serve.report()


def _objects(capa: list[str], env: dict[str, str], cwd: Path, kubeconfig: Path, kind: str) -> list[Any]:
    out = run([*capa, "--kubeconfig", str(kubeconfig), "get", kind, "-A", "-o", "json"], env, cwd)
    return list(json.loads(out)["items"])
