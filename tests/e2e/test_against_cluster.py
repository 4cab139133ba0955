"""The controller against a Kubernetes cluster of the developer's: ``make e2e`` with ``KUBECONFIG`` set.

``make e2e`` passes ``KUBECONFIG`` on as ``CAPA_E2E_KUBECONFIG``; without it this module is skipped (``make
test`` never sets it, so a developer's everyday ``KUBECONFIG`` is never touched by the normal suite). Any API
server works: a kind or EKS cluster, or ``capa serve --write-kubeconfig``.

What it does there, with a moto server on this machine as AWS:

* creates the CRDs ``capa manifests crds`` prints that the cluster lacks (an existing CRD, Cluster API
  core's ``clusters.cluster.x-k8s.io`` for one, is never replaced) and waits until they are served;
* creates a namespace of its own and applies the example there under a cluster name of its own;
* runs ``capa controller --namespace <it>`` on this machine against the cluster (no leader election, so a
  capa-py Deployment elsewhere in the cluster does not make it wait; it reconciles only its namespace);
* waits with ``capa apply`` until ready, checks moto holds exactly one of every resource and no orphan,
  deletes with ``capa delete --wait``, checks nothing is left, and removes its namespace. The CRDs it created
  stay.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.aws import AWSCluster
from capa_py.api.core import Namespace
from capa_py.api.loader import load_manifest_text
from capa_py.store.errors import NotFound, StoreError
from capa_py.store.kube import KubeStore
from tests.e2e.e2e_support import (
    EXAMPLE,
    MotoInspector,
    capa_env,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
    wait_for,
)
from tests.e2e.test_controller_mode import Background

KUBECONFIG_ENV = "CAPA_E2E_KUBECONFIG"
KUBECONFIG = os.environ.get(KUBECONFIG_ENV, "").split(os.pathsep)[0]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not KUBECONFIG,
        reason=f"no cluster given: run `make e2e` with KUBECONFIG set (it sets {KUBECONFIG_ENV})",
    ),
]


@pytest.fixture
def cluster_store() -> Iterator[KubeStore]:
    store = KubeStore.from_kubeconfig(KUBECONFIG)
    store.check()
    yield store
    store.close()


def ensure_crds(store: KubeStore, env: dict[str, str]) -> list[str]:
    """Create the CRDs the cluster lacks; the names of those created."""
    printed = subprocess.run(
        [sys.executable, "-m", "capa_app.cli", "manifests", "crds"],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    ).stdout  # fmt: skip
    created = []
    for crd in load_manifest_text(printed, "crds"):
        assert isinstance(crd, CustomResourceDefinition)
        try:
            store.get(CustomResourceDefinition, crd.metadata.name)
        except NotFound:
            store.create(crd)
            created.append(crd.metadata.name)
    return created


def manifest_for(path: Path, name: str, namespace: str) -> Path:
    """The example with its cluster renamed (``demo`` → ``name``) and every object in ``namespace``."""
    text = re.sub(r"\bdemo\b", name, EXAMPLE.read_text())
    documents = [d for d in yaml.safe_load_all(text) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def capa_run(env: dict[str, str], cwd: Path, *args: str, timeout: float = 300.0) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "capa_app.cli", "--kubeconfig", KUBECONFIG, *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, (
        f"$ capa {' '.join(args)}\nexit {completed.returncode}\n{completed.stdout[-3000:]}\n"
        f"{completed.stderr[-3000:]}"
    )
    return completed.stdout


def test_the_controller_converges_and_tears_down_the_example_in_the_given_cluster(
    tmp_path: Path, endpoint: str, inspector: MotoInspector, cluster_store: KubeStore
) -> None:
    env = capa_env(tmp_path / "home")
    suffix = secrets.token_hex(3)
    name, namespace = f"e2e-{suffix}", f"capa-e2e-{suffix}"
    manifest = manifest_for(tmp_path / "cluster.yaml", name, namespace)
    tag_key = f"sigs.k8s.io/cluster-api-provider-aws/cluster/{name}"
    baseline = inspector.inventory(tag_key).counts("total")

    ensure_crds(cluster_store, env)
    assert wait_for(lambda: _served(cluster_store, AWSCluster), timeout=60), (
        "the AWSCluster CRD is not served"
    )
    cluster_store.create(Namespace.model_validate({"metadata": {"name": namespace}}))
    controller = Background(
        "controller",
        [
            "--kubeconfig", KUBECONFIG, "controller", "--namespace", namespace, "--aws-endpoint", endpoint,
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0",
        ],
        env,
        tmp_path,
    )  # fmt: skip
    try:
        controller.wait_for_line(r"controllers running:", timeout=60)
        capa_run(env, tmp_path, "apply", "-f", str(manifest), "--timeout", "4m")

        objects: list[Any] = []
        for kind in ("awsclusters", "awsmachines"):
            out = capa_run(env, tmp_path, "get", kind, "-n", namespace, "-o", "yaml")
            objects += list(yaml.safe_load(out)["items"])
        expected = expected_counts(manifest)
        problems = problems_with_cluster(
            inspector.inventory(tag_key), expected, baseline, recorded_ids(objects)
        )
        assert not problems, "\n".join(problems)

        capa_run(env, tmp_path, "delete", "-f", str(manifest), "--wait", "--timeout", "4m")
        left = inspector.inventory(tag_key).counts("tagged")
        assert not any(left.values()), f"left in AWS after the delete: {left}"
        assert controller.stop(signal.SIGTERM) == 0, controller.report()
    finally:
        controller.stop(signal.SIGKILL, timeout=10)
        with contextlib.suppress(NotFound):
            cluster_store.delete(Namespace, namespace)


def _served(store: KubeStore, kind: Any) -> bool:
    try:
        store.list(kind, namespace="default")
    except StoreError:  # not served yet: 404 while the CRD is being established
        return False
    return True
