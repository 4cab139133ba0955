"""The Dockerfile builds what the Deployment runs: the same user, the ``capa`` entry point, every package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from capa_py.manifests.deployment import RUN_AS_USER, deployment

ROOT = Path(__file__).resolve().parents[2]


def test_dockerfile_runs_as_the_deployment_user_with_the_capa_entry_point() -> None:
    text = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER (\d+):(\d+)$", text, flags=re.MULTILINE)
    assert users == [(str(RUN_AS_USER), str(RUN_AS_USER))]
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == RUN_AS_USER
    assert 'ENTRYPOINT ["capa"]' in text
    assert pod["containers"][0]["command"] == ["capa"]


def test_dockerfile_copies_every_package_the_project_installs() -> None:
    text = (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    copied = re.findall(r"^COPY (\w+) \./\1$", text, flags=re.MULTILINE)
    assert sorted(copied) == sorted(packages)
