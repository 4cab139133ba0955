"""The tasks of the workload cluster workflows, under the names the workflow design gives them; each
behaviour is written once on :class:`WorkloadContext` and made a task of every kind that lists it."""

from __future__ import annotations

from capa_py.api.clusterconfig import ClusterConfig
from capa_py.logging import get_logger
from capa_py.manifests.crds import crd_for
from capa_py.workflow import steps
from capa_py.workflow.provider import CLUSTER_NAME_LABEL
from capa_py.workflow.workload.context import WorkloadContext

_log = get_logger("workflow.workload")


def create_workload_cluster(ctx: WorkloadContext) -> None:
    """Runs after the Pre hooks, with the management cluster's components running there. Stores the
    cluster's objects and its ClusterConfig on the management cluster, waits until the provider has made the
    cluster (Cluster, infrastructure and every machine ready), then waits for its ``<cluster>-kubeconfig``
    Secret (stored from ``spec.controlPlane.kubeconfigFile`` when the config names one) and writes the
    kubeconfig to ``<state dir>/clusters/<cluster>/kubeconfig``."""
    steps.store_stand_in_kubeconfig(ctx.management, ctx.spec)
    ctx.provider.create_cluster(ctx.management, ctx.spec, ctx.timeout)
    steps.fetch_cluster_kubeconfig(ctx.management, ctx.spec, ctx.state_dir, ctx.timeout)


def install_networking(ctx: WorkloadContext) -> None:
    """Runs once the workload cluster's API server is reachable; only when the config names a CNI
    manifest. Applies it to the workload cluster; applying it again changes nothing."""
    steps.install_networking(ctx.workload().kubeconfig, ctx.spec)


def upgrade_networking(ctx: WorkloadContext) -> None:
    """Runs first in an upgrade, only when the config names a CNI manifest. Applies the manifest as the
    config now gives it to the workload cluster."""
    steps.install_networking(ctx.workload().kubeconfig, ctx.spec)


def install_capa_components(ctx: WorkloadContext) -> None:
    """Runs once the workload cluster's API server is reachable. Installs capa-py's ClusterConfig kind (its
    CRD) there and stores the cluster's ClusterConfig, so that what the cluster was made from can be read
    from the cluster itself. Applying again changes nothing."""
    from capa_py.workflow.kubeapply import apply_documents

    config = ctx.spec.config.model_copy(deep=True)
    config.metadata.labels[CLUSTER_NAME_LABEL] = ctx.spec.name
    apply_documents(ctx.workload().kubeconfig, [crd_for(ClusterConfig), config.to_dict()])


def upgrade_capa_components(ctx: WorkloadContext) -> None:
    """Runs after Upgrade Networking. Applies this capa-py version's ClusterConfig CRD and the cluster's
    ClusterConfig as the config now gives it to the workload cluster."""
    install_capa_components(ctx)


def upgrade_cluster(ctx: WorkloadContext) -> None:
    """Runs with the workload cluster's components current. Asks the provider to bring the cluster's
    objects on the management cluster to the config: mutable changes applied, each machine whose
    infrastructure changed replaced, one at a time (the new machine ready before the old is deleted)."""
    done = ctx.provider.upgrade_cluster(
        ctx.management, ctx.spec, ctx.timeout, steps.rollout_reporter(ctx.notify)
    )
    _log.info("cluster upgraded", cluster=ctx.spec.name, steps=[f"{s.action} {s.machine}" for s in done])


def write_cluster_config(ctx: WorkloadContext) -> None:
    """Runs once the cluster is upgraded. Writes the cluster file to
    ``<state dir>/clusters/<cluster>/cluster.yaml`` and stores the ClusterConfig on the management cluster."""
    steps.write_cluster_files(ctx.state_dir, ctx.spec)
    steps.install_cluster_configuration(ctx.management, ctx.spec)


def delete_workload_cluster(ctx: WorkloadContext) -> None:
    """Runs after the Pre hooks. Deletes the cluster on the management cluster so that the controllers
    there de-provision it, waits until all of it is gone, then deletes its Secrets and ClusterConfig."""
    ctx.provider.delete_cluster(ctx.management, ctx.spec, ctx.timeout)
