"""``/openapi/v2`` as kubectl 1.27 and 1.28 read it: they ask only for the protobuf form and unmarshal it as
gnostic's ``openapi.v2.Document``, and without it refuse ``apply``, ``diff``, ``edit`` and ``explain`` (404
from ``capa serve`` before it served the document). The real API server judges the negotiation (which
``Accept`` gets JSON, protobuf or 406, the entity tag, 304) and the wire form (its protobuf document decodes
with capa-py's message definitions to what its JSON says), and kubectl judges the rest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.apiserver.proto import openapi_v2_pb2 as pb
from tests.apiserver.apiserver_support import EXAMPLE, Server
from tests.apiserver.peer_support import (
    Endpoint,
    capa_endpoint,
    peer_endpoint,
)
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds
from tests.peers.kubectl import kubectl_binary

PROTOBUF_ASKED = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
AWSCLUSTER = "io.x-k8s.cluster.infrastructure.v1beta2.AWSCluster"
AWSCLUSTER_PATH = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsclusters/{name}"


@pytest.fixture
def both(server: Server, peer_cluster: PeerCluster, tmp_path: Path) -> list[Endpoint]:
    install_capa_crds(peer_cluster)
    return [capa_endpoint(server, tmp_path / "capa"), peer_endpoint(peer_cluster)]


def _yaml(any_value: pb.Any) -> Any:
    return yaml.safe_load(any_value.yaml)


def _from_json(doc: dict[str, Any]) -> dict[str, Any]:
    """What kubectl reads of the AWSCluster kind, from the JSON form."""
    schema = doc["definitions"][AWSCLUSTER]
    spec = schema["properties"]["spec"]
    if "$ref" in spec:
        spec = doc["definitions"][spec["$ref"].removeprefix("#/definitions/")]
    patch = doc["paths"][AWSCLUSTER_PATH]["patch"]
    return {
        "gvk": schema["x-kubernetes-group-version-kind"],
        "properties": sorted(schema["properties"]),
        "spec": sorted(spec["properties"]),
        "spec.required": sorted(spec.get("required", [])),
        "patch.action": patch["x-kubernetes-action"],
        "patch.gvk": patch["x-kubernetes-group-version-kind"],
        # What kubectl 1.27 checks before it asks the server to validate fields.
        "patch.fieldValidation": any(p.get("name") == "fieldValidation" for p in patch["parameters"]),
    }


def _from_protobuf(message: pb.Document) -> dict[str, Any]:
    """The same, from the protobuf form."""
    definitions = {d.name: d.value for d in message.definitions.additional_properties}
    schema = definitions[AWSCLUSTER]
    properties = {p.name: p.value for p in schema.properties.additional_properties}
    spec = properties["spec"]
    if spec._ref:
        spec = definitions[spec._ref.removeprefix("#/definitions/")]
    item = next(p.value for p in message.paths.path if p.name == AWSCLUSTER_PATH)
    extensions = {e.name: _yaml(e.value) for e in item.patch.vendor_extension}
    return {
        "gvk": {e.name: _yaml(e.value) for e in schema.vendor_extension}["x-kubernetes-group-version-kind"],
        "properties": sorted(properties),
        "spec": sorted(p.name for p in spec.properties.additional_properties),
        "spec.required": sorted(spec.required),
        "patch.action": extensions["x-kubernetes-action"],
        "patch.gvk": extensions["x-kubernetes-group-version-kind"],
        "patch.fieldValidation": any(
            p.parameter.non_body_parameter.query_parameter_sub_schema.name == "fieldValidation"
            for p in item.patch.parameters
        ),
    }


@pytest.mark.parametrize(
    ("accept", "answered"),
    [
        (None, "application/json"),
        ("application/json", "application/json"),
        ("*/*", "application/json"),
        (PROTOBUF_ASKED, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
        ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", None),
        (f"application/json;q=0.5, {PROTOBUF_ASKED}", None),
        ("application/yaml", None),
    ],
)
def test_openapi_v2_answers_each_accept_header_as_the_api_server_does(
    both: list[Endpoint], accept: str | None, answered: str | None
) -> None:
    observed = []
    for endpoint in both:
        reply = endpoint.send("GET", "/openapi/v2", headers={"Accept": accept} if accept else {})
        observed.append((reply.status, reply.headers.get("Content-Type"), reply.status == 406 and reply.body))
    assert observed[0] == observed[1], f"capa serve {observed[0]}, kube-apiserver {observed[1]}"
    if answered is not None:
        assert observed[0][:2] == (200, answered)


def test_openapi_v2_entity_tag_answers_a_matching_if_none_match_with_304(both: list[Endpoint]) -> None:
    for endpoint in both:
        first = endpoint.send("GET", "/openapi/v2", headers={"Accept": PROTOBUF_ASKED})
        etag = first.headers["ETag"]
        assert etag is not None, endpoint.name
        assert etag.startswith('"'), endpoint.name
        again = endpoint.send("GET", "/openapi/v2", headers={"Accept": PROTOBUF_ASKED, "If-None-Match": etag})
        assert (again.status, again.body) == (304, b""), endpoint.name


def test_openapi_v2_protobuf_and_json_say_the_same_on_both_servers(both: list[Endpoint]) -> None:
    """Decoding the real API server's protobuf with capa-py's message definitions gives what its JSON says
    (so the field numbers are the wire schema's); capa serve's two forms agree too, and both servers
    describe the AWSCluster kind and its patch operation alike."""
    seen = {}
    for endpoint in both:
        as_json = _from_json(endpoint.send("GET", "/openapi/v2").json())
        protobuf = endpoint.send("GET", "/openapi/v2", headers={"Accept": PROTOBUF_ASKED}).body
        assert _from_protobuf(pb.Document.FromString(protobuf)) == as_json, endpoint.name
        seen[endpoint.name] = as_json
    assert seen["capa serve"] == seen["kube-apiserver"]


# -- kubectl 1.27 and 1.28 -------------------------------------------------------------------------------


def _kubectl(version: str, endpoint: Endpoint, home: Path) -> Any:
    binary = kubectl_binary(version)
    if binary is None:
        pytest.skip(f"kubectl.{version} is not installed")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(endpoint.kubeconfig)}

    def run(*args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [binary, *args], env={**env, **extra}, capture_output=True, text=True, timeout=120, check=False
        )
        if check:
            assert done.returncode == 0, f"kubectl.{version} {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done

    return run


def _explained_fields(text: str) -> list[str]:
    """The field names ``kubectl explain`` lists under FIELDS."""
    fields = text.split("FIELDS:", 1)[1]
    return re.findall(r"^  (\w+)\s+<", fields, flags=re.MULTILINE)


@pytest.mark.parametrize("version", ["1.27", "1.28"])
def test_kubectl_apply_diff_explain_and_edit_work(
    version: str, server: Server, peer_cluster: PeerCluster, tmp_path: Path
) -> None:
    capa = capa_endpoint(server, tmp_path / "capa")
    kubectl = _kubectl(version, capa, tmp_path / "home")
    applied = kubectl("apply", "-f", str(EXAMPLE))
    assert "awscluster.infrastructure.cluster.x-k8s.io/demo created" in applied.stdout

    same = kubectl("diff", "-f", str(EXAMPLE), check=False)
    assert (same.returncode, same.stdout) == (0, ""), same.stderr
    changed_file = tmp_path / "changed.yaml"
    changed_file.write_text(EXAMPLE.read_text().replace("team: platform", "team: other"))
    changed = kubectl("diff", "-f", str(changed_file), check=False)
    assert changed.returncode == 1, changed.stderr
    assert "-    team: platform\n+    team: other" in changed.stdout

    editor = tmp_path / "editor.py"
    editor.write_text(
        "import pathlib, sys\n"
        "path = pathlib.Path(sys.argv[1])\n"
        "path.write_text(path.read_text().replace('team: platform', 'team: edited'))\n"
    )
    kubectl("edit", "awscluster", "demo", KUBE_EDITOR=f"{sys.executable} {editor}")
    stored = json.loads(kubectl("get", "awscluster", "demo", "-o", "json").stdout)
    assert stored["spec"]["additionalTags"]["team"] == "edited"

    install_capa_crds(peer_cluster)
    explained = {}
    for endpoint in (capa, peer_endpoint(peer_cluster)):
        run = _kubectl(version, endpoint, tmp_path / "home")
        explained[endpoint.name] = _explained_fields(run("explain", "awscluster.spec").stdout)
    assert "region" in explained["capa serve"]
    assert explained["capa serve"] == explained["kube-apiserver"]
