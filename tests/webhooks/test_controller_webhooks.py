"""``capa controller --webhook-cert-dir``: the webhooks served by the controller process itself.

A real ``capa controller`` subprocess serves AdmissionReviews over HTTPS with a self-signed certificate the
client trusts (as the API server trusts the ValidatingWebhookConfiguration's CA bundle), whether or not it
holds the Lease; a certificate it cannot load stops it before anything else starts.
"""

from __future__ import annotations

import signal
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from capa_py.api import AWSCluster
from capa_py.runtime.leader import LeaderElector, LeaseTiming, holder_identity
from capa_py.store import SQLiteStore
from capa_py.webhooks import validate_path
from tests.cli.cli_support import Cli
from tests.cli.test_controller_cmd import SHORT_LEASE, ControllerProcess
from tests.webhooks.certificates import write_certificate
from tests.webhooks.test_webhooks import post_to

pytestmark = pytest.mark.slow


@pytest.fixture
def processes() -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for process in started:
        process.close()


def admission_review(cidr: str) -> dict[str, Any]:
    awscluster = {
        "apiVersion": AWSCluster.API_VERSION,
        "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": cidr}}},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1beta2", "kind": "AWSCluster"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "demo",
            "object": awscluster,
        },
    }


def test_controller_serves_webhooks_while_waiting_for_the_lease_and_stops_them_on_sigterm(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    certs = tmp_path / "certs"
    write_certificate(certs)
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        # Another replica leads: this one must serve the webhooks all the same.
        other = LeaderElector(store, holder_identity("capa controller"), timing=LeaseTiming.for_duration(3))
        other.acquire(wait=False)
        other.start_renewing()
        try:
            controller = ControllerProcess(
                state,
                closed_endpoint,
                *SHORT_LEASE,
                *("--webhook-cert-dir", str(certs), "--webhook-bind-address", "127.0.0.1:0"),
            )
            processes.append(controller)
            url = urlsplit(controller.line("webhooks: ").split()[1])
            assert url.scheme == "https"
            assert url.hostname == "127.0.0.1"
            assert url.port
            controller.line("waiting for the store lease ")

            invalid = admission_review("10.0.0.1/16")
            status, answer = post_to(url.port, validate_path(AWSCluster), invalid, certs / "tls.crt")
            assert status == 200
            response = answer["response"]
            assert response["uid"] == invalid["request"]["uid"]
            assert response["allowed"] is False, answer
            causes = response["status"]["details"]["causes"]
            assert [cause["field"] for cause in causes] == ["spec.network.vpc.cidrBlock"], causes

            valid = admission_review("10.0.0.0/16")
            _, answer = post_to(url.port, validate_path(AWSCluster), valid, certs / "tls.crt")
            assert answer["response"] == {"uid": valid["request"]["uid"], "allowed": True}
            assert not controller.has_line("controllers running"), "it served webhooks without leading"
        finally:
            other.release()
    controller.line("leading: ")
    controller.proc.send_signal(signal.SIGTERM)
    assert controller.wait() == 0, str(controller)
    with pytest.raises((ConnectionError, ssl.SSLError)):
        post_to(url.port, validate_path(AWSCluster), admission_review("10.0.0.0/16"), certs / "tls.crt")


def test_without_a_certificate_directory_no_webhook_is_served(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    controller = ControllerProcess(tmp_path / "state.db", closed_endpoint)
    processes.append(controller)
    controller.line("controllers running: ")
    assert not controller.has_line("webhooks:"), str(controller)
    controller.proc.send_signal(signal.SIGTERM)
    assert controller.wait() == 0, str(controller)


def _unloadable(kind: str, directory: Path) -> str:
    """A certificate directory broken in one way; returns the file the error must name."""
    if kind == "missing":
        directory.mkdir()
        return "tls.crt"
    write_certificate(directory)
    if kind == "garbled certificate":
        (directory / "tls.crt").write_text(
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
        )
        return "tls.crt"
    other = directory.parent / "other"
    write_certificate(other)
    (directory / "tls.key").write_bytes((other / "tls.key").read_bytes())
    return "tls.key"


@pytest.mark.parametrize("kind", ["missing", "garbled certificate", "key of another certificate"])
def test_an_unloadable_certificate_exits_2_naming_the_directory_and_file_before_anything_starts(
    cli: Cli, state: Path, tmp_path: Path, closed_endpoint: str, kind: str
) -> None:
    certs = tmp_path / "certs"
    culprit = _unloadable(kind, certs)
    result = cli("controller", "--aws-endpoint", closed_endpoint, "--webhook-cert-dir", str(certs))
    assert result.exit_code == 2, result
    message = " ".join(result.stderr.split())
    assert str(certs) in message, result
    assert culprit in message, result
    assert "controllers running" not in result.stdout
    assert not state.exists(), "the store is not even opened"


def test_a_malformed_webhook_address_exits_2(cli: Cli, state: Path, closed_endpoint: str) -> None:
    result = cli("controller", "--aws-endpoint", closed_endpoint, "--webhook-bind-address", "nowhere")
    assert result.exit_code == 2, result
    message = " ".join(result.stderr.split())
    assert "--webhook-bind-address: not a bind address: 'nowhere'" in message, result
    assert not state.exists()


def test_help_says_webhooks_are_off_without_a_certificate_directory(cli: Cli) -> None:
    result = cli("controller", "--help")
    text = " ".join(result.stdout.split())
    assert "--webhook-cert-dir" in text
    assert "without it no webhook is served" in text
    assert "--webhook-bind-address" in text


def test_a_webhook_port_in_use_exits_1_before_any_reconcile(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    certs = tmp_path / "certs"
    write_certificate(certs)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "controller",
            *("--aws-endpoint", closed_endpoint, "--webhook-cert-dir", str(certs)),
            *("--webhook-bind-address", f"127.0.0.1:{port}"),
            *("--metrics-bind-address", "0", "--health-probe-bind-address", "0"),
        )
    assert result.exit_code == 1, result
    assert "the webhook server did not start" in result.stderr, result
    assert "controllers running" not in result.stdout
