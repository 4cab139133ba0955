"""What several workflows' tasks do, written once: reaching a new cluster's API server through its
``<cluster>-kubeconfig`` Secret, installing its networking, installing capa-py's components, moving
clusters between two clusters, and where a workflow keeps a cluster's files.

The tasks themselves (in ``management`` and ``workload``) are thin: each calls one of these with what its
context holds, so every task still does one thing and the behaviour is tested once.
"""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from capa_py.api.clusterconfig import ClusterConfig
from capa_py.api.core import Secret
from capa_py.api.meta import ObjectMeta
from capa_py.logging import get_logger
from capa_py.move import MoveResult, move
from capa_py.operations import apply_objects
from capa_py.store.errors import AlreadyExists
from capa_py.workflow.clusters import ClusterAccess, write_kubeconfig
from capa_py.workflow.config import ClusterFile
from capa_py.workflow.kubeapply import (
    KUBECONFIG_KEY,
    ManifestError,
    apply_documents,
    cluster_kubeconfig,
    kubeconfig_secret_name,
    read_manifest,
)
from capa_py.workflow.provider import (
    CLUSTER_NAME_LABEL,
    Components,
    Provider,
    ProvisioningError,
    RolloutStep,
    StepPhase,
    opened,
)

_log = get_logger("workflow.steps")

KUBECONFIG_SECRET_TYPE = "cluster.x-k8s.io/secret"
POLL_INTERVAL = 0.5


def cluster_directory(state_dir: Path, name: str) -> Path:
    """Where the workflows keep a cluster's kubeconfig and cluster file: ``<state dir>/clusters/<name>``."""
    return state_dir / "clusters" / name


def cluster_kubeconfig_path(state_dir: Path, name: str) -> Path:
    return cluster_directory(state_dir, name) / "kubeconfig"


def store_stand_in_kubeconfig(cluster: ClusterAccess, spec: ClusterFile) -> None:
    """When the config names the cluster's kubeconfig (no control-plane provider writes it), store it as
    the ``<cluster>-kubeconfig`` Secret, as a control-plane provider would. A Secret already there is kept."""
    path = spec.control_plane_kubeconfig
    if path is None:
        return
    secret = Secret(
        metadata=ObjectMeta(
            name=kubeconfig_secret_name(spec.name),
            namespace=spec.namespace,
            labels={CLUSTER_NAME_LABEL: spec.name},
        ),
        type=KUBECONFIG_SECRET_TYPE,
        data={KUBECONFIG_KEY: base64.b64encode(path.read_bytes()).decode()},
    )
    with opened(cluster) as store:
        try:
            store.create(secret)
        except AlreadyExists:
            return
    _log.info("stored the cluster's kubeconfig Secret", cluster=spec.name, secret=secret.name)


def fetch_cluster_kubeconfig(
    cluster: ClusterAccess, spec: ClusterFile, state_dir: Path, timeout: float
) -> Path:
    """Wait (up to ``timeout``) for the ``<cluster>-kubeconfig`` Secret on ``cluster`` and write its
    kubeconfig to the cluster's directory; the path written."""
    deadline = time.monotonic() + timeout
    with opened(cluster) as store:
        while True:
            try:
                document = cluster_kubeconfig(store, spec.namespace, spec.name)
            except ManifestError as exc:
                raise ProvisioningError(str(exc)) from exc
            if document is not None:
                break
            if time.monotonic() >= deadline:
                raise ProvisioningError(
                    f"no Secret {spec.namespace}/{kubeconfig_secret_name(spec.name)} on {cluster.name} after "
                    f"{timeout:g}s: the control-plane provider writes it, or set "
                    "spec.controlPlane.kubeconfigFile in the ClusterConfig"
                )
            time.sleep(POLL_INTERVAL)
    path = cluster_kubeconfig_path(state_dir, spec.name)
    write_kubeconfig(path, document)
    return path


def install_networking(kubeconfig: Path, spec: ClusterFile) -> None:
    """Apply the config's CNI manifest to the cluster's API server."""
    source = spec.config.spec.networking.cni_manifest
    if source is None:
        raise ValueError("the ClusterConfig names no CNI manifest (spec.networking.cniManifest)")
    docs = read_manifest(source, spec.path.parent)
    applied = apply_documents(kubeconfig, docs)
    _log.info("networking applied", cluster=spec.name, documents=len(applied))


def install_components(
    cluster: ClusterAccess, spec: ClusterFile, core: Components, provider: Provider
) -> list[str]:
    """capa-py's components, then the provider's, on ``cluster``; the names of what was installed."""
    core.install(cluster, spec)
    provider.install_components(cluster, spec)
    return [core.name, provider.name]


def install_cluster_configuration(cluster: ClusterAccess, spec: ClusterFile) -> None:
    """Store the ClusterConfig (labelled with its cluster's name) on ``cluster``."""
    config: ClusterConfig = spec.config.model_copy(deep=True)
    config.metadata.labels[CLUSTER_NAME_LABEL] = spec.name
    with opened(cluster) as store:
        apply_objects(store, [config])


def pivot(source: ClusterAccess, target: ClusterAccess, spec: ClusterFile) -> MoveResult:
    """Move the cluster's objects from ``source`` to ``target`` (``capa move``): re-running after an
    interruption completes the move."""
    with opened(source) as from_store, opened(target) as to_store:
        result = move(from_store, to_store, namespace=spec.namespace, cluster=spec.name)
    _log.info(
        "pivoted", cluster=spec.name, source=source.name, target=target.name, objects=len(result.objects)
    )
    return result


def write_cluster_files(state_dir: Path, spec: ClusterFile) -> Path:
    """Copy the cluster file to the cluster's directory (``cluster.yaml``); the path written."""
    directory = cluster_directory(state_dir, spec.name)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "cluster.yaml"
    shutil.copyfile(spec.path, target)
    return target


def remove_cluster_files(state_dir: Path, name: str) -> None:
    shutil.rmtree(cluster_directory(state_dir, name), ignore_errors=True)


def describe_rollout_step(step: RolloutStep, phase: StepPhase) -> str | None:
    """One progress line for a machine's rollout step (None: nothing worth saying)."""
    if step.action == "unchanged":
        return None
    if step.action == "replace":
        if phase == "started":
            return f"replacing machine {step.machine}: {step.old} -> {step.new}"
        return f"replaced machine {step.machine}: {step.new} ready, {step.old} deleted"
    verb = {"create": ("creating", "created"), "delete": ("deleting", "deleted")}[step.action]
    name = step.new if step.action == "create" else step.old
    return f"{verb[0] if phase == 'started' else verb[1]} machine {step.machine} ({name})"


def rollout_reporter(notify: Callable[[str], None]) -> Callable[[RolloutStep, StepPhase], None]:
    """An ``on_step`` for :func:`capa_app.rollout.roll_out` that reports through ``notify``."""

    def report(step: RolloutStep, phase: StepPhase) -> None:
        line = describe_rollout_step(step, phase)
        if line is not None:
            notify(line)

    return report
