"""CRD-defined kinds on capa serve and on the real kube-apiserver: what clients see must be the same.

Each test does the same on both servers and compares what comes back, modulo what differs by nature (ages,
resourceVersions, uids, managedFields). Before capa serve served CRD-defined kinds, every comparison here
failed (the kinds were 404 on capa serve).
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.apiserver_support import Server
from tests.apiserver.crd_support import (
    KOPF_CRDS,
    TABLE,
    Api,
    Kubectl,
    capa_kubeconfig,
    find_kubectl,
    widget,
    widget_crd,
)
from tests.peers.cluster import PeerCluster

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_AGE = re.compile(r"^\d+[smhdy](\d+[smh])?$")


@pytest.fixture
def group() -> str:
    """A group of its own per test: the real API server is shared by the whole session."""
    return f"t{secrets.token_hex(4)}.capa-py.example.com"


@pytest.fixture
def both(peer_cluster: PeerCluster, server: Server) -> dict[str, Api]:
    return {
        "peer": Api(peer_cluster.url, peer_cluster.admin_context()),
        "capa": Api(server.url, server.context),
    }


def _tokens(text: str) -> list[list[str]]:
    """Output lines as words, each age (``5s``, ``2m30s``) replaced by AGE."""
    return [["AGE" if _AGE.match(word) else word for word in line.split()] for line in text.splitlines()]


def _established(api: Api, group: str) -> None:
    api.until(lambda: api("GET", f"/apis/{group}/v1")[0] == 200, f"{group}/v1 served")


def _delete_crds(api: Api, names: list[str]) -> None:
    for name in names:
        api("DELETE", f"{CRDS}/{name}")
    for name in names:
        api.until(lambda name=name: api("GET", f"{CRDS}/{name}")[0] == 404, f"{name} deleted")  # type: ignore[misc]


def test_kubectl_prints_the_same_as_against_the_api_server(
    peer_cluster: PeerCluster, server: Server, both: dict[str, Api], group: str, tmp_path: Path
) -> None:
    binary = find_kubectl()
    if binary is None:
        pytest.skip("kubectl is not installed")
    kubectls = {
        "peer": Kubectl(binary, peer_cluster.admin_kubeconfig, tmp_path / "peer"),
        "capa": Kubectl(binary, capa_kubeconfig(server, tmp_path / "capa" / "config"), tmp_path / "capa"),
    }
    resource = f"widgets.v1.{group}"
    bad = widget(group, "bad", color="purple", size=11, owner="ABCDEFGHIJ", tags=["a", "b", "c"])
    seen: dict[str, list[Any]] = {}
    try:
        for side, kubectl in kubectls.items():
            kubectl.apply([*KOPF_CRDS, widget_crd(group)])
            waited = kubectl(
                "wait", "--for", "condition=established", f"crd/widgets.{group}", "--timeout=60s"
            )
            assert waited.returncode == 0, waited.stderr
            kubectl.apply([widget(group, "w1", color="red", owner="alice", parts=[{"name": "p"}])])
            outputs: list[Any] = []
            for args in (
                ("get", "kopfpeerings"),
                ("get", "clusterkopfpeerings"),
                ("get", resource),
                ("get", resource, "-o", "wide"),
                ("get", f"wd.v1.{group}"),
                ("get", "all-widgets"),
                ("get", f"widgets.{group}"),
                ("get", resource, "w1", "-o", "jsonpath={.spec}"),
                ("get", f"widgets.v2.{group}", "w1", "-o", "jsonpath={.apiVersion} {.spec.size}"),
                ("api-resources", f"--api-group={group}"),
                ("api-resources", "--api-group=kopf.dev"),
            ):
                done = kubectl(*args)
                outputs.append((args, done.returncode, _tokens(done.stdout), _tokens(done.stderr)))
            refused = kubectl("create", "-f", "-", stdin=__import__("json").dumps(bad))
            # The API server lists the failing fields in no fixed order.
            outputs.append(("create bad", refused.returncode, sorted(map(tuple, _tokens(refused.stderr)))))
            patched = kubectl(
                "patch",
                resource,
                "w1",
                "--subresource=status",
                "--type=merge",
                "-p",
                '{"status":{"ready":true}}',
            )
            outputs.append(("patch status", patched.returncode, _tokens(patched.stdout)))
            outputs.append(("after", _tokens(kubectl("get", resource).stdout)))
            deleted = kubectl("delete", "crd", f"widgets.{group}", "--timeout=60s")
            outputs.append(("delete crd", deleted.returncode, _tokens(deleted.stdout)))
            gone = kubectl("get", resource)
            # The API server answers an unknown resource's path with a plain-text 404 (kubectl adds what it
            # asked for), capa serve with a NotFound Status.
            outputs.append(("gone", gone.returncode, _tokens(gone.stderr)[0][:4]))
            seen[side] = outputs
    finally:
        _delete_crds(both["peer"], [f"widgets.{group}"])
    for peer, capa in zip(seen["peer"], seen["capa"], strict=True):
        assert capa == peer


def test_the_api_answers_as_the_api_server_does(both: dict[str, Api], group: str) -> None:
    answers: dict[str, list[Any]] = {}
    widgets = f"/apis/{group}/v1/namespaces/default/widgets"
    merge = "application/merge-patch+json"
    try:
        for side, api in both.items():
            seen: list[Any] = []
            assert api("POST", CRDS, widget_crd(group))[0] == 201
            _established(api, group)
            seen.append(api("GET", f"/apis/{group}")[1])
            _, listing = api("GET", f"/apis/{group}/v1")
            seen.append(
                [
                    {k: v for k, v in r.items() if k not in ("verbs", "storageVersionHash")}
                    for r in listing["resources"]
                ]
            )
            api.until(
                lambda api=api: "conditions" in api("GET", f"{CRDS}/widgets.{group}")[1].get("status", {}),  # type: ignore[misc]
                "CRD conditions",
            )
            _, crd = api("GET", f"{CRDS}/widgets.{group}")
            status = crd["status"]
            seen.append(
                (
                    [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]],
                    status["acceptedNames"],
                    status["storedVersions"],
                    crd["spec"]["names"],
                    crd["spec"].get("conversion"),
                )
            )
            bad = widget(group, "bad", color="purple", size=0, owner="ab1", tags="x", parts=[{"weight": 2}])
            bad["spec"]["labels"] = {"x": 3}
            code, refused = api("POST", widgets, bad)
            seen.append((code, refused["reason"], refused["details"]["kind"], refused["details"]["group"]))
            seen.append(sorted((c["field"], c["reason"], c["message"]) for c in refused["details"]["causes"]))
            code, missing = api("POST", widgets, {**widget(group, "none"), "spec": None})
            seen.append((code, missing["message"], missing["details"]["causes"]))

            good = widget(
                group, "w1", color="red", unknown=1, free={"a": {"b": 1}}, port=8080, parts=[{"name": "p"}]
            )
            good["extra"] = "top"
            good["status"] = {"ready": True}
            good["spec"]["owner"] = None
            code, created = api("POST", widgets, good)
            seen.append((code, sorted(created), created["spec"], created["metadata"]["generation"]))
            code, written = api(
                "PATCH", f"{widgets}/w1/status", {"status": {"junk": 1}, "spec": {"color": "blue"}}, merge
            )
            seen.append((code, written["spec"], written["status"], written["metadata"]["generation"]))
            code, written = api(
                "PATCH", f"{widgets}/w1", {"spec": {"color": "green"}, "status": {"ready": True}}, merge
            )
            seen.append((code, written["spec"], written["status"], written["metadata"]["generation"]))
            code, table = api("GET", widgets, accept=TABLE)
            seen.append(
                [(c["name"], c["type"], c["format"], c["priority"]) for c in table["columnDefinitions"]]
            )
            seen.append([row["cells"][:-1] for row in table["rows"]])
            _, through_v2 = api("GET", f"/apis/{group}/v2/namespaces/default/widgets/w1")
            seen.append((through_v2["apiVersion"], through_v2["spec"], through_v2["status"]))

            held = widget(group, "held", color="blue")
            held["metadata"]["finalizers"] = ["example.com/hold"]
            assert api("POST", widgets, held)[0] == 201
            code, marked = api("DELETE", f"{CRDS}/widgets.{group}")
            seen.append(
                (code, marked["metadata"]["finalizers"], [c["type"] for c in marked["status"]["conditions"]])
            )
            code, forbidden = api("POST", widgets, widget(group, "late", color="red"))
            seen.append((code, forbidden["reason"], forbidden["message"], forbidden["details"]))
            api.until(lambda api=api: api("GET", f"{widgets}/w1")[0] == 404, "w1 deleted")  # type: ignore[misc]
            _, crd = api("GET", f"{CRDS}/widgets.{group}")
            seen.append(
                [
                    (c["type"], c["reason"], c["message"])
                    for c in crd["status"]["conditions"]
                    if c["type"] == "Terminating"
                ]
            )
            api("PATCH", f"{widgets}/held", {"metadata": {"finalizers": None}}, merge)
            api.until(lambda api=api: api("GET", f"{CRDS}/widgets.{group}")[0] == 404, "CRD deleted")  # type: ignore[misc]
            api.until(lambda api=api: api("GET", f"/apis/{group}/v1")[0] == 404, "no longer served")  # type: ignore[misc]
            answers[side] = seen
    finally:
        _delete_crds(both["peer"], [f"widgets.{group}"])
    for peer, capa in zip(answers["peer"], answers["capa"], strict=True):
        assert capa == peer
