"""The ``coordination.k8s.io/v1`` Lease: Kubernetes' wire form, registered for the store and ``get``."""

from __future__ import annotations

from typing import Any

from capa_py.api.coordination import Lease
from capa_py.api.registry import REGISTRY
from capa_py.store import SQLiteStore

# As `kubectl get lease -n kube-system kube-controller-manager -o json` prints one (MicroTime: microseconds).
KUBECTL_LEASE: dict[str, Any] = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {
        "creationTimestamp": "2026-01-02T03:00:00Z",
        "name": "kube-controller-manager",
        "namespace": "kube-system",
        "resourceVersion": "4242",
        "uid": "0f7f9c1e-5d1a-4c3b-9d8e-2f1b0c7a6e55",
    },
    "spec": {
        "acquireTime": "2026-01-02T03:04:05.000123Z",
        "holderIdentity": "node-1_7b0c2f4e-1d3a-4e5f-8a9b-0c1d2e3f4a5b",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 3,
        "renewTime": "2026-01-02T03:09:59.987654Z",
    },
}


def test_a_lease_round_trips_exactly_as_kubectl_prints_it() -> None:
    lease = Lease.from_dict(KUBECTL_LEASE)
    assert lease.holder == "node-1_7b0c2f4e-1d3a-4e5f-8a9b-0c1d2e3f4a5b"
    assert lease.spec.renew_time is not None
    assert lease.spec.renew_time.microsecond == 987654
    assert lease.to_dict() == KUBECTL_LEASE


def test_leases_resolve_by_the_names_kubectl_accepts() -> None:
    for name in ("leases", "lease", "Lease", "leases.coordination.k8s.io"):
        assert REGISTRY.resolve(name) is Lease, name
    assert Lease.NAMESPACED
    assert not Lease.HAS_STATUS


def test_the_store_keeps_a_lease_without_status_or_generation(store: SQLiteStore) -> None:
    document = {k: v for k, v in KUBECTL_LEASE.items() if k != "metadata"}
    document["metadata"] = {"name": "capa-py-controller", "namespace": "capa-py-system"}
    created = store.create(Lease.from_dict(document))
    stored = store.get(Lease, "capa-py-controller", "capa-py-system").to_dict()
    assert stored["spec"] == KUBECTL_LEASE["spec"]
    assert "status" not in stored
    assert "generation" not in stored["metadata"]
    assert created.metadata.resource_version == stored["metadata"]["resourceVersion"]
