"""The validating webhooks over real HTTPS: AdmissionReview in, allowed or denied with field causes out.

The certificate is a self-signed one made for 127.0.0.1 per test (with ``cryptography``); the client trusts
exactly that certificate, as an API server trusts the CA bundle of a ValidatingWebhookConfiguration.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from capa_py.api import AWSCluster, AWSMachine
from capa_py.webhooks import (
    CertificateReloader,
    RunningWebhook,
    WebhookConfigError,
    start_in_thread,
    validate_path,
)
from tests.support.eventually import eventually
from tests.webhooks.certificates import write_certificate


def post(running: RunningWebhook, path: str, body: Any, cafile: Path) -> tuple[int, Any]:
    return post_to(running.port, path, body, cafile)


def post_to(port: int, path: str, body: Any, cafile: Path) -> tuple[int, Any]:
    """POST ``body`` as JSON to https://127.0.0.1:PORT/PATH trusting exactly ``cafile``."""
    context = ssl.create_default_context(cafile=str(cafile))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def aws_cluster(cidr: str = "10.0.0.0/16", region: str = "us-east-1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": AWSCluster.API_VERSION,
        "kind": "AWSCluster",
        "metadata": {"name": "demo", "namespace": "default", "resourceVersion": "7"},
        "spec": {"region": region, "network": {"vpc": {"cidrBlock": cidr}}, **spec},
    }


def admission(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1beta2", "kind": obj["kind"]},
        "operation": operation,
        "namespace": obj["metadata"].get("namespace"),
        "name": obj["metadata"]["name"],
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_the_paths_follow_controller_runtimes_convention() -> None:
    assert validate_path(AWSCluster) == "/validate-infrastructure-cluster-x-k8s-io-v1beta2-awscluster"
    assert validate_path(AWSMachine) == "/validate-infrastructure-cluster-x-k8s-io-v1beta2-awsmachine"


def test_a_valid_create_is_allowed_with_the_requests_uid(webhook: RunningWebhook, cert_dir: Path) -> None:
    review = admission("CREATE", aws_cluster())
    status, answer = post(webhook, validate_path(AWSCluster), review, cert_dir / "tls.crt")

    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}


def test_what_the_crd_schema_cannot_express_is_denied_naming_the_field(
    webhook: RunningWebhook, cert_dir: Path
) -> None:
    # Host bits set in the CIDR: a schema pattern accepts it, admission does not.
    review = admission("CREATE", aws_cluster(cidr="10.0.0.1/16"))
    status, answer = post(webhook, validate_path(AWSCluster), review, cert_dir / "tls.crt")

    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["uid"] == review["request"]["uid"]
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    fields = [cause["field"] for cause in response["status"]["details"]["causes"]]
    assert fields == ["spec.network.vpc.cidrBlock"], response


def test_an_immutable_field_changed_on_update_is_denied_with_both_values(
    webhook: RunningWebhook, cert_dir: Path
) -> None:
    old = aws_cluster(region="us-east-1")
    new = aws_cluster(region="us-west-2")
    status, answer = post(
        webhook, validate_path(AWSCluster), admission("UPDATE", new, old), cert_dir / "tls.crt"
    )

    response = answer["response"]
    assert status == 200
    assert response["allowed"] is False
    causes = response["status"]["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.region"], causes
    assert "us-east-1" in causes[0]["message"]
    assert "us-west-2" in causes[0]["message"]


def test_an_update_leaving_immutable_fields_alone_is_allowed(webhook: RunningWebhook, cert_dir: Path) -> None:
    old = aws_cluster()
    new = aws_cluster(additionalTags={"team": "red"})
    _, answer = post(webhook, validate_path(AWSCluster), admission("UPDATE", new, old), cert_dir / "tls.crt")
    assert answer["response"]["allowed"] is True, answer


def as_the_api_server_sends_it(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with the metadata a real kube-apiserver has set by the time it calls a webhook."""
    metadata = {
        **obj["metadata"],
        "uid": str(uuid.uuid4()),
        "generation": 1,
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "managedFields": [
            {
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": obj["apiVersion"],
                "time": "2025-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:region": {}}},
            }
        ],
    }
    return {**obj, "metadata": metadata}


def test_metadata_the_models_do_not_keep_is_no_reason_to_deny(
    webhook: RunningWebhook, cert_dir: Path
) -> None:
    """Failed before: a real API server sends ``metadata.managedFields`` in every AdmissionReview, and every
    create and update was denied as ``metadata.managedFields: unknown field``."""
    create = admission("CREATE", as_the_api_server_sends_it(aws_cluster()))
    _, answer = post(webhook, validate_path(AWSCluster), create, cert_dir / "tls.crt")
    assert answer["response"]["allowed"] is True, answer

    old = as_the_api_server_sends_it(aws_cluster(region="us-east-1"))
    new = as_the_api_server_sends_it(aws_cluster(region="us-west-2"))
    _, answer = post(webhook, validate_path(AWSCluster), admission("UPDATE", new, old), cert_dir / "tls.crt")
    causes = answer["response"]["status"]["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.region"], "the immutable field is still judged"


def test_delete_is_always_allowed(webhook: RunningWebhook, cert_dir: Path) -> None:
    review = admission("DELETE", aws_cluster(cidr="10.0.0.1/16"))
    _, answer = post(webhook, validate_path(AWSCluster), review, cert_dir / "tls.crt")
    assert answer["response"]["allowed"] is True


def test_a_body_that_is_not_an_admission_review_is_a_400(webhook: RunningWebhook, cert_dir: Path) -> None:
    status, answer = post(webhook, validate_path(AWSCluster), {"kind": "Nothing"}, cert_dir / "tls.crt")
    assert status == 400
    assert "AdmissionReview" in answer["error"]


def test_a_missing_certificate_is_refused_before_serving_naming_the_directory(tmp_path: Path) -> None:
    with pytest.raises(WebhookConfigError, match=r"--webhook-cert-dir .*empty.*tls\.crt"):
        start_in_thread(tmp_path / "empty", port=0)


def test_a_rotated_certificate_is_served_without_a_restart(webhook: RunningWebhook, cert_dir: Path) -> None:
    old_ca = cert_dir.parent / "old.crt"
    old_ca.write_bytes((cert_dir / "tls.crt").read_bytes())
    write_certificate(cert_dir, common_name="capa-webhook-rotated")
    # Make sure the modification time moves even on a coarse clock.
    later = time.time() + 5
    for name in ("tls.crt", "tls.key"):
        os.utime(cert_dir / name, (later, later))

    status, _ = eventually(
        lambda: post(
            webhook, validate_path(AWSCluster), admission("CREATE", aws_cluster()), cert_dir / "tls.crt"
        ),
        "the webhook serving the new certificate",
        timeout=10,
        interval=0.1,
        ignoring=(ssl.SSLError,),
    )
    assert status == 200
    with pytest.raises(ssl.SSLError):
        post(webhook, validate_path(AWSCluster), admission("CREATE", aws_cluster()), old_ca)


def test_the_reloader_reports_whether_it_loaded(cert_dir: Path) -> None:
    reloader = CertificateReloader(cert_dir)
    assert reloader.reload() is False, "unchanged files are not loaded again"
    later = time.time() + 5
    os.utime(cert_dir / "tls.crt", (later, later))
    assert reloader.reload() is True
