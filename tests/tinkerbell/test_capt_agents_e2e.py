"""The bare-metal walkthrough of docs/tinkerbell/cluster-api.md as real processes: ``capa controller
--providers tinkerbell`` with the
workflow server and Hegel (no AWS endpoint or credentials at all), one ``capa tink agent`` per Hardware with
the process runtime, and ``capa apply`` of the bare-metal example, as a MachineDeployment
(``examples/tinkerbell-cluster.yaml``: the workers scale by applying it again with other replicas) and with
its machines one by one (``examples/tinkerbell-cluster-machines.yaml``: a machine deleted by name). Every
machine is provisioned on Hardware of its own by the agents running its workflow; Hegel serves each
machine's bootstrap data to its Hardware's address; removing a machine frees its Hardware, deleting the
cluster frees all of them."""

from __future__ import annotations

import http.client
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cli.test_controller_cmd import ControllerProcess
from tests.cli.test_tink_agent import issue_tokens, running_agents
from tests.cli.test_tink_hegel import _free_port
from tests.e2e.e2e_support import Capa
from tests.tinkerbell.capt_world import DEPLOYMENT, machine_deployment_manifests, workers_bootstrap

pytestmark = pytest.mark.slow(minutes=2)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster-machines.yaml"
DEPLOYMENT_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster.yaml"
MACHINES = ("lab-cp-0", "lab-worker-0", "lab-worker-1")
HARDWARE = tuple(f"lab-{i}" for i in range(1, 6))
OWNER = "v1alpha1.tinkerbell.org/ownerName"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Capa, int, list[subprocess.Popen[str]]]]:
    """The controller (workflow server on a free port, Hegel on another) and five agents."""
    state = tmp_path / "state.db"
    hegel_port, server_port = _free_port(), _free_port()
    controller = ControllerProcess(
        state,
        None,
        *("--providers", "tinkerbell"),
        *("--tink-server-port", str(server_port), "--hegel-port", str(hegel_port)),
    )
    try:
        address = controller.line("tink server: ").split(": ", 1)[1]
        assert address == f"127.0.0.1:{server_port}"
        controller.line("controllers running: ")
        # The normal path: a token per Hardware (the examples' Hardware reference these Secrets).
        tokens = issue_tokens(("--state", str(state)), HARDWARE, tmp_path / "tokens")
        with running_agents(tmp_path, address, HARDWARE, tokens=tokens) as agents:
            yield Capa(state), hegel_port, agents
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
    finally:
        controller.close()


def _user_data(port: int, source: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        connection.request("GET", "/2009-04-04/user-data")
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def _by_name(items: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(i["metadata"]["name"]): i for i in items}  # type: ignore[index]


def test_agents_provision_the_example_cluster_and_deleting_frees_the_hardware(
    lab: tuple[Capa, int, list[subprocess.Popen[str]]],
) -> None:
    capa, hegel_port, _ = lab
    applied = capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "2m")
    assert "AWS calls: 0 (0 mutating)" in applied.stdout, applied

    machines = _by_name(capa.get("machines"))
    tinkerbell = _by_name(capa.get("tinkerbellmachines"))
    hardware = _by_name(capa.get("hardware"))
    workflows = _by_name(capa.get("workflows"))
    taken: dict[str, str] = {}
    for name in MACHINES:
        hw = tinkerbell[name]["spec"]["hardwareName"]  # type: ignore[index]
        taken[name] = hw
        assert machines[name]["status"]["phase"] == "Provisioned"  # type: ignore[index]
        assert machines[name]["spec"]["providerID"] == f"tinkerbell://default/{hw}"  # type: ignore[index]
        assert hardware[hw]["metadata"]["labels"][OWNER] == name  # type: ignore[index]
        # The agent of that Hardware ran every action of the machine's workflow.
        status = workflows[name]["status"]  # type: ignore[index]
        assert status["state"] == "Succeeded"
        assert {a["state"] for a in status["actions"].values()} == {"Succeeded"}
        # Hegel answers the Hardware's address with the machine's bootstrap data.
        ip = hardware[hw]["spec"]["networkInterfaces"].popitem()[1]["dhcp"]["ip"]  # type: ignore[index]
        code, body = _user_data(hegel_port, ip)
        assert code == 200
        assert f"hostname: {name}" in body
    assert len(set(taken.values())) == len(MACHINES), taken
    free = [hw for hw in HARDWARE if hw not in taken.values()]
    assert all(OWNER not in hardware[hw]["metadata"].get("labels", {}) for hw in free)  # type: ignore[attr-defined]

    freed = taken["lab-worker-1"]
    capa.ok("delete", "machine", "lab-worker-1", "--wait", "--timeout", "2m")
    after = _by_name(capa.get("hardware"))[freed]
    assert OWNER not in after["metadata"].get("labels", {})  # type: ignore[attr-defined]
    assert "userdata" not in (after["spec"].get("instance") or {})  # type: ignore[attr-defined]
    assert "lab-worker-1" not in _by_name(capa.get("workflows"))

    capa.ok("delete", "cluster", "lab", "--wait", "--timeout", "2m")
    assert capa.get("machines") == []
    assert capa.get("workflows") == []
    assert all(OWNER not in h["metadata"].get("labels", {}) for h in capa.get("hardware"))


def test_agents_provision_the_machine_deployment_example_and_scaling_down_frees_a_hardware(
    lab: tuple[Capa, int, list[subprocess.Popen[str]]], tmp_path: Path
) -> None:
    capa, hegel_port, _ = lab
    applied = capa.ok("apply", "-f", str(DEPLOYMENT_EXAMPLE), "--timeout", "2m")
    assert "AWS calls: 0 (0 mutating)" in applied.stdout, applied
    [deployment] = capa.get("machinedeployments")
    assert (deployment["status"]["readyReplicas"], deployment["status"]["phase"]) == (2, "Running")  # type: ignore[index]

    machines = _by_name(capa.get("machines"))
    tinkerbell = _by_name(capa.get("tinkerbellmachines"))
    workflows = _by_name(capa.get("workflows"))
    hardware = _by_name(capa.get("hardware"))
    assert len(machines) == 3, sorted(machines)
    taken = {name: tinkerbell[name]["spec"]["hardwareName"] for name in machines}  # type: ignore[index]
    assert len(set(taken.values())) == 3, taken
    bootstrap = workers_bootstrap()
    for name, hw in taken.items():
        assert machines[name]["status"]["phase"] == "Provisioned"  # type: ignore[index]
        assert workflows[name]["status"]["state"] == "Succeeded"  # type: ignore[index]
        ip = hardware[hw]["spec"]["networkInterfaces"].popitem()[1]["dhcp"]["ip"]  # type: ignore[index]
        code, body = _user_data(hegel_port, ip)
        assert code == 200
        if name.startswith(f"{DEPLOYMENT}-"):
            assert body == bootstrap, name  # the MachineDeployment's Secret
            assert hw in ("lab-4", "lab-5"), "rack b is preferred"

    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump_all(machine_deployment_manifests(1, "default")))
    capa.ok("apply", "-f", str(one), "--timeout", "2m")
    left = {name for name in _by_name(capa.get("machines")) if name.startswith(f"{DEPLOYMENT}-")}
    assert len(left) == 1, left
    freed = {hw for name, hw in taken.items() if name.startswith(f"{DEPLOYMENT}-") and name not in left}
    [hw] = freed
    assert OWNER not in _by_name(capa.get("hardware"))[hw]["metadata"].get("labels", {})  # type: ignore[attr-defined]

    capa.ok("delete", "cluster", "lab", "--wait", "--timeout", "2m")
    assert capa.get("machines") == []
    assert capa.get("workflows") == []
    assert all(OWNER not in h["metadata"].get("labels", {}) for h in capa.get("hardware"))
