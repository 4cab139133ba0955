"""A parameter's ARN names the parameter (what ``capa audit``'s tags discovery reads). Leaked parameters
are found, classified and deleted in test_audit_bootstrap_chunks.py, on both backends."""

from __future__ import annotations

from capa_app.audit.arns import parse_arn


def test_a_parameter_arn_names_the_parameter() -> None:
    ref = parse_arn("arn:aws:ssm:us-east-1:123456789012:parameter/cluster.x-k8s.io/abc/0")
    assert (ref.kind, ref.id, ref.region) == ("parameter", "/cluster.x-k8s.io/abc/0", "us-east-1")
