"""Tinkerbell over the Kubernetes API: the workflow controller running against ``capa serve`` through the
kube store (as it runs in a management cluster), and the CLI pointed at the same server with
``--kubeconfig``: ``apply --wait`` returns once the workflow is prepared there, ``delete --wait`` once it is
gone, saying it ended Canceled."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from capa_py.runtime.events import EventRecorder
from capa_py.runtime.manager import Manager
from capa_py.store.kube import KubeStore
from controllers.tinkerbell import WorkflowController
from tests.cli.cli_support import Cli
from tests.cli.test_cli_kube_store import SAFETY_TIMEOUT, kubeconfig  # noqa: F401

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell"
NAMESPACE = "tink-kube"


@pytest.fixture
def manifests(tmp_path: Path) -> list[str]:
    """The examples, in a namespace of this module's own on the shared server."""
    paths = []
    for name in ("osie", "hardware", "template", "workflow"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            (EXAMPLES / f"{name}.yaml").read_text().replace("namespace: default", f"namespace: {NAMESPACE}")
        )
        paths.append(str(path))
    return paths


@pytest.fixture
def controller_at_server(kubeconfig: Path) -> Iterator[None]:  # noqa: F811
    """The workflow controller reconciling through the API server, in a thread."""
    store = KubeStore.from_kubeconfig(kubeconfig)
    manager = Manager(store, [WorkflowController(store, EventRecorder(store))])
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(SAFETY_TIMEOUT)
        store.close()


def test_a_workflow_is_prepared_and_canceled_through_the_api_server(
    cli: Cli,
    kubeconfig: Path,  # noqa: F811
    manifests: list[str],
    controller_at_server: None,
) -> None:
    at = ("--kubeconfig", str(kubeconfig))
    applied = cli(*at, "apply", *[arg for path in manifests for arg in ("-f", path)], "--timeout", "60s")
    assert applied.exit_code == 0, str(applied)
    shown = cli(*at, "get", "workflow", "provision-machine1", "-n", NAMESPACE, "-o", "yaml")
    assert shown.exit_code == 0, str(shown)
    status = yaml.safe_load(shown.stdout)["status"]
    assert status["state"] == "Pending"
    assert len(status["actions"]) == 4
    deleted = cli(
        *at, "delete", "workflow", "provision-machine1", "-n", NAMESPACE, "--wait", "--timeout", "60s"
    )
    assert deleted.exit_code == 0, str(deleted)
    assert "workflow/provision-machine1 Canceled: " in deleted.stdout, str(deleted)
    gone = cli(*at, "get", "workflow", "provision-machine1", "-n", NAMESPACE)
    assert gone.exit_code == 1, str(gone)
