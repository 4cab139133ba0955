"""The validating webhooks for the Tinkerbell kinds: AdmissionReviews over real HTTPS, answered by the same
admission ``capa apply`` and ``capa serve`` run, by the in-process server and by ``capa controller``."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import OSIE, Hardware, Template, Workflow
from capa_py.webhooks import RunningWebhook, start_in_thread, validate_path
from tests.api.tinkerbell_objects import HARDWARE, MAC, TEMPLATE, WORKFLOW, changed
from tests.api.tinkerbell_objects import OSIE as OSIE_DOC
from tests.cli.test_controller_cmd import ControllerProcess
from tests.webhooks.certificates import write_certificate
from tests.webhooks.test_webhooks import post_to

BAD_IP = changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "ip"), "10.0.0.300")
BAD_IP_FIELD = f'spec.networkInterfaces["{MAC}"].dhcp.ip'


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    write_certificate(directory)
    return directory


@pytest.fixture
def server(certs: Path) -> Iterator[RunningWebhook]:
    running = start_in_thread(certs, port=0, reload_interval=0.1)
    yield running
    running.stop()


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    group, version = obj["apiVersion"].split("/")
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "operation": operation,
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def answer(port: int, model: type[KubeObject], body: dict[str, Any], certs: Path) -> dict[str, Any]:
    status, answered = post_to(port, validate_path(model), body, certs / "tls.crt")
    assert status == 200, answered
    response: dict[str, Any] = answered["response"]
    assert response["uid"] == body["request"]["uid"]
    return response


def causes(response: dict[str, Any]) -> list[tuple[str, str]]:
    assert response["allowed"] is False, response
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    return [(c["field"], c["message"]) for c in response["status"]["details"]["causes"]]


@pytest.mark.parametrize(
    ("model", "doc"), [(Hardware, HARDWARE), (OSIE, OSIE_DOC), (Template, TEMPLATE), (Workflow, WORKFLOW)]
)
def test_a_valid_object_of_each_kind_is_allowed(
    server: RunningWebhook, certs: Path, model: type[KubeObject], doc: dict[str, Any]
) -> None:
    body = review("CREATE", doc)
    assert answer(server.port, model, body, certs) == {"uid": body["request"]["uid"], "allowed": True}


def test_an_invalid_hardware_is_denied_with_the_causes(server: RunningWebhook, certs: Path) -> None:
    doc = changed(BAD_IP, ("spec", "ipxe"), {"url": "tftp://x/a.ipxe"})
    found = causes(answer(server.port, Hardware, review("CREATE", doc), certs))
    assert found == [
        (BAD_IP_FIELD, "not an IPv4 address: '10.0.0.300'"),
        ("spec.ipxe.url", "not an http(s) URL: 'tftp://x/a.ipxe'"),
    ]


def test_an_invalid_template_is_denied_naming_each_field(server: RunningWebhook, certs: Path) -> None:
    doc = changed(TEMPLATE, ("spec", "actions", 1, "name"), "stream-image")
    doc = changed(doc, ("spec", "volumes"), ["/a:/b:ro,rw"])
    fields = [field for field, _ in causes(answer(server.port, Template, review("CREATE", doc), certs))]
    assert fields == ["spec.actions[1].name", "spec.volumes[0]"]


def test_a_started_workflows_spec_change_is_denied_naming_spec(server: RunningWebhook, certs: Path) -> None:
    running = changed(WORKFLOW, ("status",), {"state": "Running", "startedAt": "2026-01-01T00:00:00Z"})
    longer = changed(running, ("spec", "timeout"), 7200)
    [(field, message)] = causes(answer(server.port, Workflow, review("UPDATE", longer, running), certs))
    assert field == "spec"
    assert message == "immutable once the workflow has started (state Running); changed: spec.timeout"

    progressed = changed(running, ("status", "currentAction"), "reboot")
    assert answer(server.port, Workflow, review("UPDATE", progressed, running), certs)["allowed"] is True
    pending = changed(WORKFLOW, ("status",), {"state": "Pending"})
    edited = changed(pending, ("spec", "timeout"), 7200)
    assert answer(server.port, Workflow, review("UPDATE", edited, pending), certs)["allowed"] is True


@pytest.mark.slow
def test_capa_controller_serves_the_tinkerbell_webhooks(
    tmp_path: Path, certs: Path, closed_endpoint: str
) -> None:
    controller = ControllerProcess(
        tmp_path / "state.db",
        closed_endpoint,
        *("--webhook-cert-dir", str(certs), "--webhook-bind-address", "127.0.0.1:0"),
    )
    try:
        url = urlsplit(controller.line("webhooks: ").split()[1])
        assert url.port
        found = causes(answer(url.port, Hardware, review("CREATE", BAD_IP), certs))
        assert found == [(BAD_IP_FIELD, "not an IPv4 address: '10.0.0.300'")]
        body = review("CREATE", HARDWARE)
        assert answer(url.port, Hardware, body, certs) == {"uid": body["request"]["uid"], "allowed": True}
    finally:
        controller.proc.send_signal(signal.SIGTERM)
        code = controller.wait()
        controller.close()
    assert code == 0, str(controller)
