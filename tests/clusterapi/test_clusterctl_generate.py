"""``clusterctl generate provider`` (v1.13.6) reading the repository ``capa manifests repository`` writes,
registered in clusterctl's configuration file as the ``InfrastructureProvider`` ``capa-py`` by a
``file://`` URL, as a user registers a provider that is not in clusterctl's built-in list."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.manifests.deployment import CREDENTIALS_KEY, CREDENTIALS_SECRET
from capa_py.manifests.rbac import NAMESPACE
from capa_py.manifests.repository import CREDENTIALS_VARIABLE, components, release_image
from tests.clusterapi.clusterctl_support import (
    CAPA_PROVIDER,
    CAPA_VERSION,
    CLUSTERCTL_LABEL,
    PROVIDER_LABEL,
    Clusterctl,
    clusterctl,
    repository_config,
)
from tests.peers.fixtures import require_go

CREDENTIALS = base64.b64encode(b"[default]\naws_access_key_id = AKIDEXAMPLE\n").decode()


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Clusterctl:
    require_go()
    return clusterctl(tmp_path_factory.mktemp("clusterctl-generate"))


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind_and_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_generate_provider_prints_the_components_with_the_credentials_filled_and_clusterctls_labels(
    tool: Clusterctl,
) -> None:
    printed = documents(
        tool.ok(
            "generate", "provider", "--infrastructure", f"capa-py:{CAPA_VERSION}",
            env={CREDENTIALS_VARIABLE: CREDENTIALS},
        )
    )  # fmt: skip
    ours = components(release_image(CAPA_VERSION))
    assert sorted(by_kind_and_name(printed)) == sorted(by_kind_and_name(ours))
    assert "${" not in yaml.safe_dump_all(printed), "a variable was left unfilled"

    objects = by_kind_and_name(printed)
    secret = objects[("Secret", CREDENTIALS_SECRET)]
    assert secret["data"] == {CREDENTIALS_KEY: CREDENTIALS}
    assert secret["metadata"]["namespace"] == NAMESPACE
    [deployment] = [d for d in printed if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == release_image(CAPA_VERSION)
    for doc in printed:
        labels = doc["metadata"]["labels"]
        assert labels[CLUSTERCTL_LABEL] == "", doc["metadata"]
        assert labels[PROVIDER_LABEL] == CAPA_PROVIDER, doc["metadata"]
    namespaced = [d for d in printed if "namespace" in d["metadata"]]
    assert namespaced
    assert {d["metadata"]["namespace"] for d in namespaced} == {NAMESPACE}


def test_generate_provider_moves_every_namespaced_component_to_the_target_namespace(tool: Clusterctl) -> None:
    target = "capa-py-elsewhere"
    printed = documents(
        tool.ok(
            "generate", "provider", "--infrastructure", f"capa-py:{CAPA_VERSION}",
            "--target-namespace", target,
            env={CREDENTIALS_VARIABLE: CREDENTIALS},
        )
    )  # fmt: skip
    [namespace] = [d for d in printed if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == target
    assert {d["metadata"]["namespace"] for d in printed if "namespace" in d["metadata"]} == {target}
    subjects = [s for d in printed if d["kind"].endswith("RoleBinding") for s in d.get("subjects", [])]
    assert subjects
    assert {s["namespace"] for s in subjects if s["kind"] == "ServiceAccount"} == {target}


def test_generate_provider_takes_the_credentials_from_clusterctls_configuration_file(
    tool: Clusterctl, tmp_path: Path
) -> None:
    repository = Path(yaml.safe_load(tool.config.read_text())["providers"][0]["url"].removeprefix("file://"))
    config = repository_config(
        tmp_path / "clusterctl.yaml",
        repository.parents[2],
        CAPA_VERSION,
        **{CREDENTIALS_VARIABLE: CREDENTIALS},
    )
    with_file = Clusterctl(tool.binary, tool.home, config)
    printed = by_kind_and_name(documents(with_file.ok("generate", "provider", "--infrastructure", "capa-py")))
    assert printed[("Secret", CREDENTIALS_SECRET)]["data"] == {CREDENTIALS_KEY: CREDENTIALS}


def test_generate_provider_refuses_to_print_without_the_credentials_variable(tool: Clusterctl) -> None:
    refused = tool.run("generate", "provider", "--infrastructure", f"capa-py:{CAPA_VERSION}")
    assert refused.returncode != 0
    assert f"value for variables [{CREDENTIALS_VARIABLE}] is not set" in refused.stderr, refused.stderr


def test_generate_provider_describe_lists_the_variable_and_the_image(tool: Clusterctl) -> None:
    described = tool.ok("generate", "provider", "--infrastructure", "capa-py", "--describe")
    fields = dict(line.split(":", 1) for line in described.splitlines() if line and not line.startswith(" "))
    assert fields["Name"].strip() == "capa-py"
    assert fields["Type"].strip() == "InfrastructureProvider"
    assert fields["Version"].strip() == CAPA_VERSION  # the only release in the repository: the latest
    assert fields["TargetNamespace"].strip() == NAMESPACE
    lines = described.splitlines()
    variables = lines[lines.index("Variables:") + 1 : lines.index("Images:")]
    assert [v.strip() for v in variables] == [f"- {CREDENTIALS_VARIABLE}"]
    images = [v.strip() for v in lines[lines.index("Images:") + 1 :] if v.strip()]
    assert images == [f"- {release_image(CAPA_VERSION)}"]
