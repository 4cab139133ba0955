"""The tasks of the management cluster workflows, under the names the workflow design gives them.

Each behaviour is written once, on :class:`ManagementContext`, and made a task of every workflow kind that
lists it (``task_of``): ``create.CREATE_BOOTSTRAP_CLUSTER`` and ``upgrade.CREATE_BOOTSTRAP_CLUSTER`` do the
same thing, each typed on its own context, so hooks bind to the task of the workflow they extend.
"""

from __future__ import annotations

from capa_py.logging import get_logger
from capa_py.workflow import steps
from capa_py.workflow.management.context import ManagementContext

_log = get_logger("workflow.management")


def create_bootstrap_cluster(ctx: ManagementContext) -> None:
    """Runs after the Pre hooks (upgrade: once the management cluster's components are current). Assumes
    nothing of the bootstrap cluster: serves it from ``<state dir>/bootstrap/<cluster>/bootstrap.db`` in this
    process, on a free loopback port, keeping whatever data an interrupted run left there (it may record
    AWS resources). ``ctx.bootstrap()`` reaches it from here on."""
    ctx.bootstrap_cluster.start()


def install_bootstrap_components(ctx: ManagementContext) -> None:
    """Runs once the bootstrap cluster serves. Starts capa-py's controllers and the provider's (with, for
    Tinkerbell, the workflow service and Hegel) in this process against the bootstrap cluster, and records
    them so that a resumed run starts them again."""
    access = ctx.bootstrap_cluster.start()
    ctx.bootstrap_components = steps.install_components(access, ctx.spec, ctx.core, ctx.provider)


def create_management_cluster(ctx: ManagementContext) -> None:
    """Runs with the bootstrap components running. Stores the cluster's objects on the bootstrap cluster,
    waits until the provider has made the cluster (Cluster, infrastructure and every machine ready), then
    waits for its ``<cluster>-kubeconfig`` Secret (stored from ``spec.controlPlane.kubeconfigFile`` when the
    config names one) and writes the kubeconfig to ``<state dir>/clusters/<cluster>/kubeconfig``, which
    ``ctx.management()`` reads from then on."""
    bootstrap = ctx.bootstrap()
    steps.store_stand_in_kubeconfig(bootstrap, ctx.spec)
    ctx.provider.create_cluster(bootstrap, ctx.spec, ctx.timeout)
    steps.fetch_cluster_kubeconfig(bootstrap, ctx.spec, ctx.state_dir, ctx.timeout)


def install_networking(ctx: ManagementContext) -> None:
    """Runs once the management cluster's API server is reachable (its kubeconfig is written); only when the
    config names a CNI manifest. Applies it to the management cluster; applying it again changes nothing."""
    steps.install_networking(ctx.management().kubeconfig, ctx.spec)


def upgrade_networking(ctx: ManagementContext) -> None:
    """Runs on a working management cluster, only when the config names a CNI manifest. Applies the
    manifest as the config now gives it: changed documents are updated, the rest left alone."""
    steps.install_networking(ctx.management().kubeconfig, ctx.spec)


def install_management_components(ctx: ManagementContext) -> None:
    """Runs once the management cluster's API server is reachable. Applies capa-py's components (CRDs, RBAC,
    the controller Deployment) and the provider's to it; idempotent."""
    steps.install_components(ctx.management(), ctx.spec, ctx.core, ctx.provider)


def upgrade_management_components(ctx: ManagementContext) -> None:
    """Runs first in an upgrade, on a working management cluster. Applies the components of this capa-py
    version (core, then the provider's) over those installed."""
    management = ctx.management()
    ctx.core.install(management, ctx.spec)
    ctx.provider.upgrade_components(management, ctx.spec)


def pivot_to_management(ctx: ManagementContext) -> None:
    """Runs once the management cluster has capa-py's and the provider's components. Moves the cluster's
    objects from the bootstrap cluster to the management cluster (``capa move``: paused, copied with status,
    deleted from the bootstrap cluster, unpaused); re-running completes an interrupted move. Nothing in the
    infrastructure changes."""
    steps.pivot(ctx.bootstrap(), ctx.management(), ctx.spec)


def pivot_to_bootstrap(ctx: ManagementContext) -> None:
    """Runs with the bootstrap components running. Moves the cluster's objects from the management cluster
    to the bootstrap cluster (the inverse of Pivot to Management), so the bootstrap cluster's controllers
    act on the cluster while it is changed or deleted."""
    steps.pivot(ctx.management(), ctx.bootstrap(), ctx.spec)


def install_cluster_configuration(ctx: ManagementContext) -> None:
    """Runs after the pivot. Stores the ClusterConfig on the management cluster (labelled with the cluster's
    name), so later operations know what the cluster was made from."""
    steps.install_cluster_configuration(ctx.management(), ctx.spec)


def upgrade_cluster(ctx: ManagementContext) -> None:
    """Runs with the cluster's objects on the bootstrap cluster. Asks the provider to bring the cluster to
    the config: mutable changes applied, each machine whose infrastructure changed replaced, one at a time
    (the new machine ready before the old one is deleted)."""
    steps_done = ctx.provider.upgrade_cluster(
        ctx.bootstrap(), ctx.spec, ctx.timeout, steps.rollout_reporter(ctx.notify)
    )
    _log.info(
        "cluster upgraded", cluster=ctx.spec.name, steps=[f"{s.action} {s.machine}" for s in steps_done]
    )


def delete_cluster(ctx: ManagementContext) -> None:
    """Runs with the cluster's objects on the bootstrap cluster. Deletes the cluster there so that the
    bootstrap cluster's controllers de-provision it, and waits until everything is gone."""
    ctx.provider.delete_cluster(ctx.bootstrap(), ctx.spec, ctx.timeout)


def delete_bootstrap_cluster(ctx: ManagementContext) -> None:
    """Runs once no cluster object is left on the bootstrap cluster (moved away or deleted). Stops its
    components and server and removes its data."""
    ctx.bootstrap_cluster.delete()
    ctx.bootstrap_components = []


def write_cluster_config(ctx: ManagementContext) -> None:
    """Runs once the upgraded cluster is back on the management cluster. Writes the cluster file to
    ``<state dir>/clusters/<cluster>/cluster.yaml`` and stores the ClusterConfig on the management
    cluster."""
    steps.write_cluster_files(ctx.state_dir, ctx.spec)
    steps.install_cluster_configuration(ctx.management(), ctx.spec)
