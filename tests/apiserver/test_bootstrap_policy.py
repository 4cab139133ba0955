"""The default RBAC policy ``capa serve`` creates when it starts: the same ClusterRoles and
ClusterRoleBindings as kube-apiserver's (read from the peer, compared field by field), and changes made to
them since kept as the API server keeps them (``rbac.authorization.kubernetes.io/autoupdate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capa_py.api.workloads import ClusterRole, ClusterRoleBinding
from capa_py.apiserver import start_in_thread
from capa_py.apiserver.bootstrap_policy import AUTOUPDATE, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES
from capa_py.store import SQLiteStore
from tests.apiserver.apiserver_support import Server
from tests.peers.cluster import PeerCluster

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _compared(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc["metadata"]
    kept = {key: doc[key] for key in ("rules", "aggregationRule", "roleRef", "subjects") if key in doc}
    return {
        "name": meta["name"],
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        **kept,
    }


def test_the_bootstrap_roles_and_bindings_are_kube_apiservers(
    server: Server, peer_cluster: PeerCluster
) -> None:
    for collection, names in (
        ("clusterroles", CLUSTER_ROLES),
        ("clusterrolebindings", CLUSTER_ROLE_BINDINGS),
    ):
        for name in names:
            status, ours = server.http("GET", f"{RBAC}/{collection}/{name}")
            assert status == 200, ours
            theirs = peer_cluster.request(f"{RBAC}/{collection}/{name}")
            assert _compared(ours) == _compared(theirs)
    assert set(CLUSTER_ROLES) >= {"cluster-admin", "system:discovery", "system:basic-user"}


def test_changes_to_the_bootstrap_policy_survive_a_restart(tmp_path: Path) -> None:
    """Marked ``autoupdate: "false"``: left as changed. Otherwise: extra rules and subjects kept, missing ones
    added back. Deleted: created again."""
    store = SQLiteStore(tmp_path / "state.db", poll_interval=0.02)
    try:
        start_in_thread(store).stop()
        admin = store.get(ClusterRole, "cluster-admin")
        admin.metadata.annotations[AUTOUPDATE] = "false"
        admin.rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        store.update(admin)
        basic = store.get(ClusterRole, "system:basic-user")
        extra = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
        basic.rules = [basic.rules[1], extra]
        store.update(basic)
        public = store.get(ClusterRoleBinding, "system:public-info-viewer")
        someone = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "someone"}
        public.subjects = [someone]
        store.update(public)
        store.delete(ClusterRoleBinding, "system:discovery")

        start_in_thread(store).stop()

        assert store.get(ClusterRole, "cluster-admin").rules == admin.rules
        assert store.get(ClusterRole, "system:basic-user").rules == [
            *basic.rules,
            CLUSTER_ROLES["system:basic-user"][0],
        ]
        subjects = store.get(ClusterRoleBinding, "system:public-info-viewer").subjects
        assert subjects[0] == someone
        assert [s["name"] for s in subjects[1:]] == CLUSTER_ROLE_BINDINGS["system:public-info-viewer"]
        assert store.get(ClusterRoleBinding, "system:discovery").subjects[0]["name"] == "system:authenticated"
    finally:
        store.close()
