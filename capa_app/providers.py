"""The providers of the cluster lifecycle workflows (:class:`AWSProvider`, :class:`TinkerbellProvider`) and
capa-py's own components (:class:`CoreComponents`): each composes its controllers, so it lives above them.
What the workflows ask of them is :mod:`capa_py.workflow.provider`."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from capa_app.rollout import label_machines, roll_out
from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.clusterconfig import ClusterConfig, ProviderName
from capa_py.api.core import Secret
from capa_py.api.machinesets import MachineDeployment
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine
from capa_py.defaults import DEFAULT_IMAGE
from capa_py.logging import get_logger
from capa_py.manifests.components import core_components, provider_components
from capa_py.operations import apply_objects
from capa_py.store.errors import NotFound
from capa_py.workflow.clusters import ClusterAccess, Stoppable
from capa_py.workflow.config import INFRASTRUCTURE_KINDS, ClusterFile
from capa_py.workflow.hook import NoopHookRegistrar
from capa_py.workflow.kubeapply import apply_documents, kubeconfig_secret_name
from capa_py.workflow.provider import CLUSTER_NAME_LABEL, OnStep, ProvisioningError, RolloutStep, opened
from controllers import aws_controllers
from controllers.core import ClusterController, MachineController
from controllers.machinesets import machine_set_controllers
from controllers.observe import observe
from controllers.tinkerbell import tinkerbell_controllers
from controllers.tinkerbell_capi import tinkerbell_capi_controllers

if TYPE_CHECKING:
    from capa_py.aws.session import ClientPool
    from capa_py.engine.engine import Engine
    from capa_py.runtime.manager import Controller
    from capa_py.store.protocol import ObjectStore

_log = get_logger("workflow.provider")


def apply_documents_to(cluster: ClusterAccess, docs: Sequence[dict[str, object]]) -> None:
    """Apply manifests to a cluster that is not the bootstrap cluster."""
    applied = apply_documents(cluster.kubeconfig, docs)
    _log.info(
        "components applied",
        cluster=cluster.name,
        created=sum(a.outcome == "created" for a in applied),
        configured=sum(a.outcome == "configured" for a in applied),
        unchanged=sum(a.outcome == "unchanged" for a in applied),
    )


def wait_for(
    cluster: ClusterAccess, targets: Sequence[KubeObject], goal: Literal["ready", "gone"], timeout: float
) -> None:
    """Wait until the controllers running for ``cluster`` bring every target to ``goal``; raise
    :class:`ProvisioningError` naming every target that did not get there."""
    with opened(cluster) as store:
        result = observe(store, targets, goal, timeout)
    if result.converged:
        return
    lines = []
    for ref, state in result.states.items():
        if state == goal:
            continue
        blocked = result.blocked.get(ref)
        lines.append(f"{ref}: {state}" + (f" ({blocked.reason}: {blocked.message})" if blocked else ""))
    why = "timed out" if result.timed_out else "failed"
    raise ProvisioningError(f"{why} waiting for {goal} on {cluster.name}: " + "; ".join(lines))


def _targets(objects: Sequence[KubeObject]) -> list[KubeObject]:
    """What a create waits on: the Cluster API objects that have a readiness (not Secrets, configs...)."""
    kinds = (
        Cluster,
        Machine,
        MachineDeployment,
        AWSCluster,
        AWSMachine,
        TinkerbellCluster,
        TinkerbellMachine,
    )
    return [o for o in objects if isinstance(o, kinds)]


class CoreComponents:
    """capa-py's own components: Cluster API core's controllers, capa-py's CRDs, its RBAC and the controller
    Deployment every provider's controllers run in."""

    name = "core"

    def __init__(self, image: str = DEFAULT_IMAGE) -> None:
        self.image = image

    def install(self, cluster: ClusterAccess, spec: ClusterFile) -> None:
        if cluster.host is not None:
            infra_cluster, infra_machine = INFRASTRUCTURE_KINDS[spec.provider]

            def build(store: ObjectStore) -> list[Controller]:
                return [
                    ClusterController(store, infrastructure_kinds=(infra_cluster,)),
                    MachineController(store, infrastructure_kinds=(infra_machine,)),
                    *machine_set_controllers(store),
                ]

            cluster.host.run(self.name, build)
            return
        apply_documents_to(
            cluster, core_components([spec.provider], spec.config.spec.tinkerbell, image=self.image)
        )


class ClusterAPIProvider(NoopHookRegistrar, abc.ABC):
    """Creating, upgrading and deleting a cluster's Cluster API objects, the same for every provider; the
    subclasses say which components to run."""

    name: ProviderName

    def install_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None:
        if cluster.host is not None:
            cluster.host.run(self.name, self.controllers, self.servers(spec))
            return
        apply_documents_to(cluster, provider_components(self.name, spec.config.spec.tinkerbell))

    def upgrade_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None:
        """Components are versioned with capa-py: upgrading applies the current manifests again."""
        self.install_components(cluster, spec)

    @abc.abstractmethod
    def controllers(self, store: ObjectStore) -> Sequence[Controller]:
        """The provider's controllers (Cluster API core's come with :class:`CoreComponents`), built over
        ``store``."""

    def servers(self, spec: ClusterFile) -> Callable[[ObjectStore], Sequence[Stoppable]] | None:
        return None

    def create_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None:
        """Store the cluster's objects (each Machine and its infrastructure machine labelled with the name
        the config gives it, for later upgrades) and the ClusterConfig, then wait until the Cluster, its
        infrastructure and every machine are ready."""
        objects = label_machines(spec.objects)
        with opened(cluster) as store:
            applied = apply_objects(store, [*objects, _stored_config(spec)])
        _log.info("cluster objects stored", cluster=spec.name, on=cluster.name, objects=len(applied))
        wait_for(cluster, _targets([a.object for a in applied]), "ready", timeout)

    def upgrade_cluster(
        self, cluster: ClusterAccess, spec: ClusterFile, timeout: float, on_step: OnStep | None = None
    ) -> list[RolloutStep]:
        """Apply the cluster-level changes and roll the machines whose infrastructure changed, one at a
        time (:mod:`capa_app.rollout`); ``on_step`` hears each machine's step start and finish."""
        with opened(cluster) as store:
            steps: list[RolloutStep] = roll_out(store, list(spec.objects), timeout=timeout, on_step=on_step)
        return steps

    def delete_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None:
        """Delete the Cluster (its controllers delete its machines and infrastructure, which de-provisions
        them), wait until all of it is gone, then delete the cluster's Secrets and its ClusterConfig."""
        with opened(cluster) as store:
            try:
                current = store.get(Cluster, spec.name, spec.namespace)
            except NotFound:
                current = None
            if current is not None and not current.being_deleted:
                store.delete(Cluster, spec.name, spec.namespace)
            machines = store.list(
                Machine, namespace=spec.namespace, label_selector=f"{CLUSTER_NAME_LABEL}={spec.name}"
            )
        targets: list[KubeObject] = [
            spec.cluster,
            *_targets([o for o in spec.objects if not isinstance(o, Cluster)]),
        ]
        targets += [m for m in machines if all(m.name != t.name or t.KIND != "Machine" for t in targets)]
        wait_for(cluster, targets, "gone", timeout)
        with opened(cluster) as store:
            leftovers: list[KubeObject] = [o for o in spec.objects if isinstance(o, Secret)]
            for obj in leftovers:
                with contextlib.suppress(NotFound):
                    store.delete(Secret, obj.name, obj.namespace)
            with contextlib.suppress(NotFound):
                store.delete(Secret, kubeconfig_secret_name(spec.name), spec.namespace)
            with contextlib.suppress(NotFound):
                store.delete(ClusterConfig, spec.name, spec.namespace)


def with_hardware_labelled(spec: ClusterFile) -> ClusterFile:
    """``spec`` with a copy of each of its Hardware labelled ``cluster.x-k8s.io/cluster-name``."""
    objects: list[KubeObject] = []
    for obj in spec.objects:
        if not isinstance(obj, Hardware):
            objects.append(obj)
            continue
        labelled = obj.model_copy(deep=True)
        labelled.metadata.labels[CLUSTER_NAME_LABEL] = spec.name
        objects.append(labelled)
    return dataclasses.replace(spec, objects=tuple(objects))


def _stored_config(spec: ClusterFile) -> ClusterConfig:
    config = spec.config.model_copy(deep=True)
    config.metadata.labels[CLUSTER_NAME_LABEL] = spec.name
    return config


class AWSProvider(ClusterAPIProvider):
    """The AWS provider: AWSCluster and AWSMachine, reconciled against the AWS endpoint ``aws()`` gives
    (called when the controllers first run in this process)."""

    name: ProviderName = "aws"

    def __init__(self, aws: Callable[[], tuple[ClientPool, Engine]]) -> None:
        self._aws = aws

    def controllers(self, store: ObjectStore) -> Sequence[Controller]:
        pool, engine = self._aws()
        return [c for c in aws_controllers(store, pool, engine) if c.name not in ("cluster", "machine")]


class TinkerbellProvider(ClusterAPIProvider):
    """The Tinkerbell provider: Hardware, Templates, Workflows and the bare-metal Cluster API kinds, with the
    workflow service the agents connect to and Hegel, on the ports the ClusterConfig gives."""

    name: ProviderName = "tinkerbell"

    def controllers(self, store: ObjectStore) -> Sequence[Controller]:
        return [*tinkerbell_controllers(store), *tinkerbell_capi_controllers(store)]

    def create_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None:
        """As for every provider, with the cluster file's Hardware labelled with the cluster's name: a pivot
        moves only what belongs to the cluster, and without the label the Hardware no machine claimed would
        stay behind on the bootstrap cluster and go with it, leaving the management cluster no spare
        Hardware for a rollout or another cluster."""
        super().create_cluster(cluster, with_hardware_labelled(spec), timeout)

    def upgrade_cluster(
        self, cluster: ClusterAccess, spec: ClusterFile, timeout: float, on_step: OnStep | None = None
    ) -> list[RolloutStep]:
        """As for every provider, with the Hardware labelled as at create: applying the file without the
        label would remove it, and the next pivot would leave the spare Hardware behind."""
        return super().upgrade_cluster(cluster, with_hardware_labelled(spec), timeout, on_step)

    def servers(self, spec: ClusterFile) -> Callable[[ObjectStore], Sequence[Stoppable]] | None:
        settings = spec.config.tinkerbell_components

        def start(store: ObjectStore) -> list[Stoppable]:
            from capa_py.tinkerbell.hegel import start_in_thread as start_hegel
            from capa_py.tinkerbell.server import start_in_thread as start_server

            started: list[Stoppable] = [
                start_server(
                    store,
                    settings.bind,
                    settings.server_port,
                    allow_unauthenticated_agents=settings.allow_unauthenticated_agents,
                )
            ]
            try:
                started.append(start_hegel(store, settings.bind, settings.hegel_port))
            except BaseException:
                started[0].stop()
                raise
            return started

        return start
