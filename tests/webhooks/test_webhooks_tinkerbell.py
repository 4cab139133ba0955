"""The validating webhooks for the Tinkerbell kinds: AdmissionReviews over real HTTPS, answered by the same
admission ``capa apply`` and ``capa serve`` run, by the in-process server and by ``capa controller``."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import OSIE, Hardware, Template, Workflow
from capa_py.webhooks import RunningWebhook, validate_path
from tests.api.tinkerbell_objects import HARDWARE, MAC, TEMPLATE, WORKFLOW, changed
from tests.api.tinkerbell_objects import OSIE as OSIE_DOC
from tests.cli.test_controller_cmd import ControllerProcess
from tests.webhooks.test_webhooks import post_to

BAD_IP = changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "ip"), "10.0.0.300")
BAD_IP_FIELD = f'spec.networkInterfaces["{MAC}"].dhcp.ip'


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


def answer(port: int, model: type[KubeObject], body: dict[str, Any], cert_dir: Path) -> dict[str, Any]:
    status, answered = post_to(port, validate_path(model), body, cert_dir / "tls.crt")
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
    webhook: RunningWebhook, cert_dir: Path, model: type[KubeObject], doc: dict[str, Any]
) -> None:
    body = review("CREATE", doc)
    assert answer(webhook.port, model, body, cert_dir) == {"uid": body["request"]["uid"], "allowed": True}


def test_an_invalid_hardware_is_denied_with_the_causes(webhook: RunningWebhook, cert_dir: Path) -> None:
    doc = changed(BAD_IP, ("spec", "ipxe"), {"url": "tftp://x/a.ipxe"})
    found = causes(answer(webhook.port, Hardware, review("CREATE", doc), cert_dir))
    assert found == [
        (BAD_IP_FIELD, "not an IPv4 address: '10.0.0.300'"),
        ("spec.ipxe.url", "not an http(s) URL: 'tftp://x/a.ipxe'"),
    ]


def test_an_invalid_template_is_denied_naming_each_field(webhook: RunningWebhook, cert_dir: Path) -> None:
    doc = changed(TEMPLATE, ("spec", "actions", 1, "name"), "stream-image")
    doc = changed(doc, ("spec", "volumes"), ["/a:/b:ro,rw"])
    fields = [field for field, _ in causes(answer(webhook.port, Template, review("CREATE", doc), cert_dir))]
    assert fields == ["spec.actions[1].name", "spec.volumes[0]"]


def test_a_started_workflows_spec_change_is_denied_naming_spec(
    webhook: RunningWebhook, cert_dir: Path
) -> None:
    running = changed(WORKFLOW, ("status",), {"state": "Running", "startedAt": "2026-01-01T00:00:00Z"})
    longer = changed(running, ("spec", "timeout"), 7200)
    [(field, message)] = causes(answer(webhook.port, Workflow, review("UPDATE", longer, running), cert_dir))
    assert field == "spec"
    assert message == "immutable once the workflow has started (state Running); changed: spec.timeout"

    progressed = changed(running, ("status", "currentAction"), "reboot")
    assert answer(webhook.port, Workflow, review("UPDATE", progressed, running), cert_dir)["allowed"] is True
    pending = changed(WORKFLOW, ("status",), {"state": "Pending"})
    edited = changed(pending, ("spec", "timeout"), 7200)
    assert answer(webhook.port, Workflow, review("UPDATE", edited, pending), cert_dir)["allowed"] is True


@pytest.mark.slow
def test_capa_controller_serves_the_tinkerbell_webhooks(
    tmp_path: Path, cert_dir: Path, closed_endpoint: str
) -> None:
    controller = ControllerProcess(
        tmp_path / "state.db",
        closed_endpoint,
        *("--webhook-cert-dir", str(cert_dir), "--webhook-bind-address", "127.0.0.1:0"),
    )
    try:
        url = urlsplit(controller.line("webhooks: ").split()[1])
        assert url.port
        found = causes(answer(url.port, Hardware, review("CREATE", BAD_IP), cert_dir))
        assert found == [(BAD_IP_FIELD, "not an IPv4 address: '10.0.0.300'")]
        body = review("CREATE", HARDWARE)
        assert answer(url.port, Hardware, body, cert_dir) == {"uid": body["request"]["uid"], "allowed": True}
    finally:
        controller.proc.send_signal(signal.SIGTERM)
        code = controller.wait()
        controller.close()
    assert code == 0, str(controller)
