"""The controller as the ServiceAccount ``capa manifests`` makes it, under capa serve's RBAC.

``capa serve`` authenticates and authorizes every request, so the RBAC ``capa manifests rbac`` generates is
enforced in embedded mode as on a cluster: the ServiceAccount's token (a TokenRequest, as ``kubectl create
token`` makes it) is all the controller holds, and with it the controller elects itself leader, creates the
quick start's cluster and deletes it again. The same token cannot read a Secret outside what the role grants.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.e2e.e2e_support import QUICK_START, ROOT, MotoInspector, capa_env
from tests.e2e.test_controller_mode import Background, processes, run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

NAMESPACE = "capa-py-system"
SERVICE_ACCOUNT = "capa-py-controller-manager"


def _service_account_kubeconfig(admin: Path, token: str, path: Path) -> Path:
    document: dict[str, Any] = yaml.safe_load(admin.read_text())
    document["users"] = [{"name": "controller", "user": {"token": token}}]
    for context in document["contexts"]:
        context["context"]["user"] = "controller"
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


def test_the_controller_with_only_its_service_accounts_token_creates_and_deletes_a_cluster(
    tmp_path: Path,
    endpoint: str,
    inspector: MotoInspector,
    processes: list[Background],  # noqa: F811
) -> None:
    env = capa_env(tmp_path / "home")
    admin = tmp_path / "admin.kubeconfig"
    capa = [sys.executable, "-m", "capa_app.cli"]
    serve = Background(
        "serve",
        ["--state", str(tmp_path / "state.db"), "serve", "--port", "0", "--write-kubeconfig", str(admin)],
        env,
        tmp_path,
    )
    processes.append(serve)
    serve.wait_for_line(r"kubeconfig written to")

    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(
        run([*capa, "manifests", "crds"], env, ROOT)
        + "\n---\n"
        + run([*capa, "manifests", "rbac"], env, ROOT)
    )
    run([*capa, "--kubeconfig", str(admin), "apply", "-f", str(manifests), "--no-wait"], env, tmp_path)

    api_client = config.new_client_from_config(str(admin))
    try:
        core = client.CoreV1Api(api_client)
        token = core.create_namespaced_service_account_token(
            SERVICE_ACCOUNT,
            NAMESPACE,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
            ),
        ).status.token
    finally:
        api_client.close()
    as_controller = _service_account_kubeconfig(admin, token, tmp_path / "controller.kubeconfig")

    sa_client = config.new_client_from_config(str(as_controller))
    try:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(sa_client).read_namespaced_secret("anything", "kube-system")
        assert refused.value.status == 403, refused.value
    finally:
        sa_client.close()

    controller = Background(
        "controller",
        [
            "--kubeconfig", str(as_controller), "controller", "--leader-elect",
            "--aws-endpoint", endpoint,
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
        ],
        env,
        tmp_path,
    )  # fmt: skip
    processes.append(controller)
    controller.wait_for_line(r"leading:", timeout=60)

    run(
        [*capa, "--kubeconfig", str(admin), "apply", "-f", str(QUICK_START), "--timeout", "4m"],
        env,
        tmp_path,
        timeout=300,
    )
    assert inspector.inventory().counts("tagged").get("instance"), "no instance was created"
    run(
        [*capa, "--kubeconfig", str(admin), "delete", "-f", str(QUICK_START), "--wait", "--timeout", "4m"],
        env,
        tmp_path,
        timeout=300,
    )
    left = inspector.inventory().counts("tagged")
    assert not any(left.values()), f"left in AWS after the delete: {left}"

    assert controller.stop(signal.SIGTERM) == 0, controller.report()
    log = controller.log.read_text()
    assert "Forbidden" not in log, controller.report()
    assert " 403" not in log, controller.report()
    assert serve.stop(signal.SIGTERM) == 0, serve.report()
