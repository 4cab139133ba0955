"""The status the infrastructure controllers write for both Cluster API contracts, stored through the real
kube-apiserver (capa-py's CRDs) and through ``capa serve``: both accept it and keep every field (nothing
pruned), and both refuse a v1beta2 condition whose reason is not in ``metav1.Condition``'s form."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.conditions import READY, set_condition
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine
from controllers.base import with_contract
from tests.apiserver.apiserver_support import Server
from tests.apiserver.twin import Twin, crd_installed, twin_namespace
from tests.peers.cluster import PeerCluster

AWS_SPEC = {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}}
OBJECTS: list[tuple[type[KubeObject], dict[str, Any]]] = [
    (AWSCluster, AWS_SPEC),
    (AWSMachine, {"instanceType": "t3.medium", "ami": {"id": "ami-785db401"}}),
    (TinkerbellCluster, {"controlPlaneEndpoint": {"host": "10.1.0.10", "port": 6443}}),
    (TinkerbellMachine, {}),
]


@pytest.fixture
def twin(server: Server, peer_cluster: PeerCluster) -> Iterator[Twin]:
    with (
        crd_installed(peer_cluster, AWSCluster),
        twin_namespace(server, peer_cluster, f"contract-{secrets.token_hex(4)}") as pair,
    ):
        yield pair


def _path(model: type[KubeObject], name: str = "") -> str:
    return f"/apis/{model.API_VERSION}/namespaces/{{ns}}/{model.PLURAL}" + (f"/{name}" if name else "")


def _written(model: type[KubeObject], spec: dict[str, Any]) -> KubeObject:
    """The object with the status a controller writes: ready once, then not ready with an AWS error code
    for a reason (not in metav1.Condition's form), both contracts' fields derived by the write path."""
    obj = model.from_dict(
        {"apiVersion": model.API_VERSION, "kind": model.KIND, "metadata": {"name": "demo"}, "spec": spec}
    )
    obj.metadata.generation = 1

    def ready(o: Any) -> None:
        o.status.ready = True
        set_condition(o.status, READY, True)
        set_condition(o.status, "InfrastructureStep", True)

    def failing(o: Any) -> None:
        o.status.ready = False
        set_condition(
            o.status, "InfrastructureStep", False, "Client.RequestLimitExceeded", "slow down", "Warning"
        )
        set_condition(o.status, READY, False, "Client.RequestLimitExceeded", "slow down", "Warning")

    with_contract(ready)(obj)
    with_contract(failing)(obj)
    return obj


@pytest.mark.parametrize(("model", "spec"), OBJECTS, ids=lambda v: getattr(v, "KIND", ""))
def test_both_servers_keep_the_status_of_both_contracts(
    twin: Twin, model: type[KubeObject], spec: dict[str, Any]
) -> None:
    obj = _written(model, spec)
    status = obj.to_dict()["status"]
    assert status["initialization"] == {"provisioned": True}
    v1beta2 = {c["type"]: c for c in status["v1beta2"]["conditions"]}
    assert v1beta2[READY]["reason"] == "ClientRequestLimitExceeded"
    assert v1beta2[READY]["message"] == "Client.RequestLimitExceeded: slow down"
    assert v1beta2[READY]["observedGeneration"] == 1

    body = {k: v for k, v in obj.to_dict().items() if k != "status"}
    body["metadata"] = {"name": "demo"}
    for side in ("real", "capa"):
        send = getattr(twin, side)
        code, created = send("POST", _path(model), body)
        assert code == 201, (side, created)
        update = copy.deepcopy(created)
        update["status"] = status
        code, written = send("PUT", _path(model, "demo") + "/status", update)
        assert code == 200, (side, written)
        code, read = send("GET", _path(model, "demo"))
        assert code == 200, (side, read)
        assert read["status"] == status, side


@pytest.mark.parametrize(("model", "spec"), OBJECTS[:1] + OBJECTS[3:], ids=lambda v: getattr(v, "KIND", ""))
def test_both_servers_refuse_a_v1beta2_reason_not_in_camel_case(
    twin: Twin, model: type[KubeObject], spec: dict[str, Any]
) -> None:
    body = {"apiVersion": model.API_VERSION, "kind": model.KIND, "metadata": {"name": "demo"}, "spec": spec}
    condition = {
        "type": READY,
        "status": "False",
        "reason": "Client.RequestLimitExceeded",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    codes = []
    for side in ("real", "capa"):
        send = getattr(twin, side)
        code, created = send("POST", _path(model), body)
        assert code == 201, (side, created)
        created["status"] = {"v1beta2": {"conditions": [condition]}}
        code, refused = send("PUT", _path(model, "demo") + "/status", created)
        codes.append(code)
        assert "reason" in str(refused), (side, refused)
    assert codes == [422, 422]
