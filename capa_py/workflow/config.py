"""Cluster files: one ``ClusterConfig`` and the Cluster API objects of one cluster, loaded and checked as a
whole before any workflow is built (the seed's *Setup and Validate*, which runs before construction).

Every problem is reported at once, each naming the file, the document and the field, and nothing is
written anywhere while a file is being loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.clusterconfig import CAPA_API_VERSION, ClusterConfig, ProviderName
from capa_py.api.loader import ManifestError, ManifestProblem, load_manifests
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine

INFRASTRUCTURE_KINDS: dict[ProviderName, tuple[type[KubeObject], type[KubeObject]]] = {
    "aws": (AWSCluster, AWSMachine),
    "tinkerbell": (TinkerbellCluster, TinkerbellMachine),
}
"""Each provider's infrastructure cluster and machine kinds."""


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


@dataclass(frozen=True)
class ClusterFile:
    """A loaded cluster file: its config and the cluster's objects, in file order (the config excluded)."""

    path: Path
    config: ClusterConfig
    objects: tuple[KubeObject, ...]

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def namespace(self) -> str:
        return self.config.namespace or "default"

    @property
    def provider(self) -> ProviderName:
        return self.config.spec.provider

    @property
    def cluster(self) -> Cluster:
        return next(o for o in self.objects if isinstance(o, Cluster))

    @property
    def machines(self) -> list[Machine]:
        return [o for o in self.objects if isinstance(o, Machine)]

    def resolve(self, source: str) -> str:
        """A path of the config as given (a URL), or relative to the file's directory."""
        if is_url(source):
            return source
        path = Path(source)
        return str(path if path.is_absolute() else self.path.parent / path)

    @property
    def cni_manifest(self) -> str | None:
        given = self.config.spec.networking.cni_manifest
        return self.resolve(given) if given else None

    @property
    def control_plane_kubeconfig(self) -> Path | None:
        given = self.config.spec.control_plane.kubeconfig_file
        return Path(self.resolve(given)) if given else None


def document_number(objects: Sequence[KubeObject], obj: KubeObject) -> int:
    """The 1-based document of ``obj``, found by identity: a document repeated verbatim is equal to the
    first copy, and the problem is with the later one."""
    return next(number for number, candidate in enumerate(objects, 1) if candidate is obj)


def load_cluster_file(path: Path, check_files: bool = True) -> ClusterFile:
    """Load and check ``path``; :class:`~capa_py.api.loader.ManifestError` lists every problem.
    ``check_files=False`` does not require the files the config names to exist yet (a plan reads none)."""
    objects = load_manifests([path])
    source = str(path)
    problems: list[ManifestProblem] = []

    def problem(obj: KubeObject | None, field: str, message: str) -> None:
        index = document_number(objects, obj) if obj is not None else 0
        subject = f"{obj.KIND} {obj.namespace}/{obj.name}" if obj is not None and obj.namespace else ""
        problems.append(ManifestProblem(source, index, subject, field, message))

    configs = [o for o in objects if isinstance(o, ClusterConfig)]
    clusters = [o for o in objects if isinstance(o, Cluster)]
    for found, what in (
        (configs, f"ClusterConfig ({CAPA_API_VERSION}) documents; a cluster file holds exactly one"),
        (clusters, "Cluster documents; a cluster file holds exactly one cluster"),
    ):
        if len(found) != 1:
            problem(found[1] if found else None, "", f"{len(found) or 'no'} {what}")
    if problems:
        raise ManifestError(problems)
    config = configs[0]
    rest = tuple(o for o in objects if o is not config)
    loaded = ClusterFile(path=path, config=config, objects=rest)
    problems += _check(loaded, objects, source, check_files)
    if problems:
        raise ManifestError(problems)
    return loaded


def _check(
    loaded: ClusterFile, objects: Sequence[KubeObject], source: str, check_files: bool
) -> list[ManifestProblem]:
    problems: list[ManifestProblem] = []
    config, cluster = loaded.config, loaded.cluster

    def problem(obj: KubeObject, field: str, message: str) -> None:
        subject = f"{obj.KIND} {obj.namespace}/{obj.name}" if obj.namespace else f"{obj.KIND} {obj.name}"
        problems.append(ManifestProblem(source, document_number(objects, obj), subject, field, message))

    if config.name != cluster.name:
        problem(config, "metadata.name", f"must be the Cluster's name ({cluster.name})")
    # Applied in file order, a repeated object would silently replace the first: say which one is meant.
    first: dict[tuple[str, str], int] = {}
    for obj in objects:
        number = first.setdefault((obj.KIND, obj.name), document_number(objects, obj))
        if number != document_number(objects, obj):
            problem(obj, "metadata.name", f"{obj.KIND} {obj.name} is already document {number}")
    for obj in objects:
        if obj.NAMESPACED and obj.namespace != loaded.namespace:
            problem(obj, "metadata.namespace", f"must be the ClusterConfig's namespace ({loaded.namespace})")
    infra_cluster, infra_machine = INFRASTRUCTURE_KINDS[loaded.provider]
    ref = cluster.spec.infrastructure_ref
    if ref is None or ref.kind != infra_cluster.KIND:
        given = ref.kind if ref is not None else "nothing"
        problem(
            cluster,
            "spec.infrastructureRef.kind",
            f"the ClusterConfig's provider is {loaded.provider}: expected {infra_cluster.KIND}, not {given}",
        )
    elif not any(isinstance(o, infra_cluster) and o.name == ref.name for o in objects):
        problem(cluster, "spec.infrastructureRef.name", f"no {infra_cluster.KIND} {ref.name} in the file")
    for machine in loaded.machines:
        if machine.spec.cluster_name != cluster.name:
            problem(machine, "spec.clusterName", f"must be the cluster's name ({cluster.name})")
        infra = machine.spec.infrastructure_ref
        if infra.kind != infra_machine.KIND:
            problem(
                machine,
                "spec.infrastructureRef.kind",
                f"the ClusterConfig's provider is {loaded.provider}: expected {infra_machine.KIND}",
            )
        elif not any(isinstance(o, infra_machine) and o.name == infra.name for o in objects):
            problem(
                machine, "spec.infrastructureRef.name", f"no {infra_machine.KIND} {infra.name} in the file"
            )
    kubeconfig_file = loaded.config.spec.control_plane.kubeconfig_file
    if kubeconfig_file is not None and is_url(kubeconfig_file):
        problem(config, "spec.controlPlane.kubeconfigFile", "a file, not a URL")
        kubeconfig_file = None
    for field, given in (
        ("spec.networking.cniManifest", loaded.config.spec.networking.cni_manifest),
        ("spec.controlPlane.kubeconfigFile", kubeconfig_file),
    ):
        if given is None or is_url(given) or not check_files:
            continue
        resolved = Path(loaded.resolve(given))
        if not resolved.is_file():
            problem(config, field, f"no such file: {resolved}")
    return problems
