"""With ``secureSecretsBackend: ssm-parameter-store``, a machine's bootstrap data goes to SSM Parameter Store
(CAPA's other backend), not into its instance's user data.

Against moto over HTTP, with the real controllers: the data is gzipped, cut in chunks of
:data:`PARAMETER_CHUNK_SIZE` bytes and stored base64-encoded as ``SecureString`` parameters named
``/cluster.x-k8s.io/<uid>/<n>`` (standard tier) before ``RunInstances``; the user data is the script that
reads them with ``aws ssm get-parameter --with-decryption`` (no contents); they are deleted once the
instance runs. A moved machine storing none again, a crash right after ``PutParameter`` (no client token:
the parameter is found by its tags, then by its name), the delete of a machine never launched and the
chunk sizes run on both backends in test_bootstrap_data.py.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from capa_py.api.aws import AWSMachine, CloudInit
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import register_client_hook
from controllers.services.bootstrap import PARAMETER_CHUNK_SIZE
from tests.controllers.conftest import Harness
from tests.controllers.test_bootstrap_data import (
    BIG,
    MACHINE,
    _control_plane,
    _user_data,
    _with_bootstrap,
)

SSM = CloudInit(secure_secrets_backend="ssm-parameter-store")


@contextmanager
def put_parameters() -> Iterator[list[dict[str, Any]]]:
    """The parameters of every ``PutParameter`` the clients made inside the block send."""
    seen: list[dict[str, Any]] = []

    def hook(raw: Any, service: str) -> None:
        def note(params: dict[str, Any], **_: Any) -> None:
            seen.append(dict(params))

        raw.meta.events.register("provide-client-params.ssm.PutParameter", note)

    unregister = register_client_hook(hook)
    try:
        yield seen
    finally:
        unregister()


def _parameters(harness: Harness) -> list[str]:
    found = harness.aws.client("ssm").pages("DescribeParameters", "Parameters")
    return sorted(p["Name"] for p in found)


def _on_parameter_store(objects: list[KubeObject]) -> list[KubeObject]:
    _control_plane(objects).spec.cloud_init = SSM.model_copy()
    return objects


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def test_bootstrap_data_is_stored_as_parameters_and_fetched_by_the_instance(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(_on_parameter_store(_with_bootstrap(example(), BIG))))
    with put_parameters() as put, call_scope() as calls:
        harness.pool = harness.new_pool()
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    machine = harness.store.get(AWSMachine, MACHINE, "default")
    prefix = f"/cluster.x-k8s.io/{machine.uid}"
    packed = gzip.compress(BIG.encode(), mtime=0)
    count = -(-len(packed) // PARAMETER_CHUNK_SIZE)
    assert count > 1
    assert [p["Name"] for p in put] == [f"{prefix}/{n}" for n in range(count)], "only this machine's"
    assert {(p["Type"], p["Tier"]) for p in put} == {("SecureString", "Standard")}
    assert all(len(p["Value"]) <= 4096 for p in put), "within the standard tier"
    assert gzip.decompress(b"".join(base64.b64decode(p["Value"]) for p in put)) == BIG.encode()
    assert all("Overwrite" not in p for p in put), "PutParameter refuses Tags with Overwrite"
    tags = {t["Key"]: t["Value"] for t in put[0]["Tags"]}
    assert tags["sigs.k8s.io/cluster-api-provider-aws/cluster/demo"] == "owned"
    assert tags["capa-py.io/role"] == f"bootstrap-parameter-{MACHINE}-0"
    by_operation = calls.by_operation()
    assert by_operation["ssm:PutParameter"] == count
    assert by_operation["ssm:DeleteParameter"] == count
    assert "secretsmanager:CreateSecret" in by_operation, "the workers keep the default backend"

    user_data = _user_data(harness)
    assert user_data.startswith(b"#!/bin/bash")
    assert f"prefix={prefix}".encode() in user_data
    assert f"count={count}".encode() in user_data
    assert b"aws ssm get-parameter" in user_data
    assert b"--with-decryption" in user_data
    assert b"aws ssm delete-parameter" in user_data
    assert b"#cloud-config" not in user_data
    assert not any(p["Value"][:64].encode() in user_data for p in put)
    assert len(user_data) < 4096

    assert _parameters(harness) == [], "deleted once the instance runs"
    assert machine.spec.cloud_init is not None
    assert machine.spec.cloud_init.secure_secrets_backend == "ssm-parameter-store"
    assert machine.spec.cloud_init.secret_prefix == prefix, "kept in the spec, which a move keeps"
    assert machine.spec.cloud_init.secret_count is None, "cleared once the parameters are deleted"
    assert not [role for role in machine.status.resources if role.startswith("bootstrap-parameter")]
    assert machine.status.ready


def test_a_parameter_prefix_parameter_store_refuses_is_refused_naming_the_field() -> None:
    for prefix in ("aws.cluster.x-k8s.io/x", "/ssm/x", "cluster x", "no-leading-slash"):
        machine = AWSMachine.model_validate(
            {
                "metadata": {"name": "m", "namespace": "default"},
                "spec": {
                    "instanceType": "t3.medium",
                    "cloudInit": {"secureSecretsBackend": "ssm-parameter-store", "secretPrefix": prefix},
                },
            }
        )
        assert [i.path for i in machine.semantic_issues()] == ["spec.cloudInit.secretPrefix"], prefix


def test_the_nodes_policy_lets_a_node_read_and_delete_its_parameters_only() -> None:
    from capa_app.iam.policy import policy_document
    from controllers.services.bootstrap import NODE_IAM_ACTIONS

    statements = policy_document("nodes")["Statement"]
    ssm = [s for s in statements if any(a.startswith("ssm:") for a in s["Action"])]
    assert ssm == [
        {
            "Effect": "Allow",
            "Action": ["ssm:DeleteParameter", "ssm:GetParameter"],
            "Resource": "arn:*:ssm:*:*:parameter/cluster.x-k8s.io/*",
        }
    ]
    granted = {a for s in statements for a in s["Action"]}
    assert set(NODE_IAM_ACTIONS) <= granted, "what the fetch scripts call"
