"""Upgrade Cluster's plan: reading a cluster config, checking it may be applied to the stored cluster, and the
steps (machines replaced one at a time, MachineDeployments rolled) that bring the cluster to it.

Nothing here waits or writes: :mod:`capa_app.rollout` carries the plan out. A replacement's name is derived
from the desired spec (``<config name>-<hash>``) and every machine carries :data:`CONFIG_NAME_LABEL`, so a
plan made again after an interrupted rollout finds what that rollout made.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from capa_py.api.cluster import CONTROL_PLANE_LABEL, Cluster, Machine
from capa_py.api.immutable import without
from capa_py.api.machinesets import MachineDeployment, MachineSet, template_hash, template_of
from capa_py.api.meta import KubeObject
from capa_py.api.registry import REGISTRY, UnknownKind
from capa_py.operations import merge_manifest, refuse_immutable_changes
from capa_py.store.errors import Invalid
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from capa_py.workflow.provider import RolloutStep
from controllers.run import ConvergeResult

CONFIG_NAME_LABEL = "capa-py.io/config-name"
"""On a Machine and its infrastructure machine: the machine's name in the cluster config. A rolled
replacement has another name but the same label, so later upgrades find a machine's current incarnation."""

HASH_LENGTH = 5

Goal = Literal["ready", "gone"]
WaitFn = Callable[[Sequence[KubeObject], Goal, float], ConvergeResult]
"""(targets, goal, timeout) → the result of waiting for the targets to reach the goal."""


class UpgradeRefused(ValueError):
    """The config cannot be rolled out; nothing was written. ``problems`` lists each, naming object and
    field: fix the config (or delete and create the cluster anew for immutable cluster-level changes)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class RolloutError(RuntimeError):
    """A wait did not converge (an object failed, is blocked or time ran out). What was done so far is
    kept: running the rollout again carries on from there."""


# -- reading the config ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigMachine:
    name: str
    machine: Machine
    infra: KubeObject


@dataclass
class _Config:
    cluster: Cluster | None = None
    infra_cluster: KubeObject | None = None
    machines: list[ConfigMachine] = field(default_factory=list)
    deployments: list[MachineDeployment] = field(default_factory=list)
    others: list[KubeObject] = field(default_factory=list)
    """Cluster-level objects and everything that is neither a Machine, an infrastructure machine nor a
    MachineDeployment."""
    problems: list[str] = field(default_factory=list)

    @property
    def namespace(self) -> str | None:
        return self.cluster.metadata.namespace if self.cluster is not None else None


def _same(ref_kind: str | None, ref_name: str | None, obj: KubeObject) -> bool:
    """Whether ``obj`` is the object a reference of that kind and name points at."""
    return ref_kind == obj.KIND and ref_name == obj.metadata.name


def _read_config(objects: Sequence[KubeObject]) -> _Config:
    config = _Config()
    clusters = [o for o in objects if isinstance(o, Cluster)]
    if len(clusters) != 1:
        config.problems.append(f"the config holds {len(clusters)} Clusters; an upgrade takes exactly one")
    else:
        config.cluster = clusters[0]
    machines = [o for o in objects if isinstance(o, Machine)]
    infra_ids: set[int] = set()
    found: list[ConfigMachine] = []
    for machine in machines:
        ref = machine.spec.infrastructure_ref
        infra = next((o for o in objects if _same(ref.kind, ref.name, o)), None)
        if infra is None:
            config.problems.append(
                f"{machine.ref()}: spec.infrastructureRef: {ref.kind} {ref.name} is not in the config"
            )
            continue
        infra_ids.add(id(infra))
        found.append(ConfigMachine(machine.metadata.name, machine, infra))
    # Control-plane machines first (a cluster keeps its API while workers roll), otherwise file order.
    config.machines = sorted(found, key=lambda m: CONTROL_PLANE_LABEL not in m.machine.metadata.labels)
    config.deployments = [o for o in objects if isinstance(o, MachineDeployment)]
    config.others = [
        o for o in objects if not isinstance(o, Machine | MachineDeployment) and id(o) not in infra_ids
    ]
    cluster = config.cluster
    if cluster is None:
        return config
    cluster_ref = cluster.spec.infrastructure_ref
    if cluster_ref is not None:
        config.infra_cluster = next(
            (o for o in objects if _same(cluster_ref.kind, cluster_ref.name, o)), None
        )
        if config.infra_cluster is None:
            config.problems.append(
                f"{cluster.ref()}: spec.infrastructureRef: {cluster_ref.kind} {cluster_ref.name} "
                "is not in the config"
            )
    for entry in config.machines:
        if entry.machine.spec.cluster_name != cluster.name:
            config.problems.append(
                f"{entry.machine.ref()}: spec.clusterName: {entry.machine.spec.cluster_name!r} is not "
                f"the config's cluster {cluster.name!r}"
            )
    for deployment in config.deployments:
        if deployment.spec.cluster_name != cluster.name:
            config.problems.append(
                f"{deployment.ref()}: spec.clusterName: {deployment.spec.cluster_name!r} is not "
                f"the config's cluster {cluster.name!r}"
            )
    return config


def label_machines(objects: Sequence[KubeObject]) -> list[KubeObject]:
    """Copies of the objects with CONFIG_NAME_LABEL set on every Machine and on the infrastructure machine its
    spec.infrastructureRef names (value = the Machine's own name in the config). Create uses this."""
    copies = [o.model_copy(deep=True) for o in objects]
    for machine in copies:
        if not isinstance(machine, Machine):
            continue
        config_name = machine.metadata.labels.get(CONFIG_NAME_LABEL, machine.metadata.name)
        machine.metadata.labels[CONFIG_NAME_LABEL] = config_name
        ref = machine.spec.infrastructure_ref
        for infra in copies:
            if _same(ref.kind, ref.name, infra):
                infra.metadata.labels[CONFIG_NAME_LABEL] = config_name
    return copies


# -- what is stored ----------------------------------------------------------------------------------------
def stored_infra(store: ObjectStore, machine: Machine) -> KubeObject | None:
    ref = machine.spec.infrastructure_ref
    if not ref.name or not ref.kind:
        return None
    try:
        kind = REGISTRY.for_gvk(ref.api_version or "", ref.kind)
    except UnknownKind:
        return None
    return get_or_none(store, kind, ref.name, ref.namespace or machine.metadata.namespace)


def _cluster_machines(store: ObjectStore, cluster: Cluster) -> list[Machine]:
    return [
        m
        for m in store.list(Machine, namespace=cluster.metadata.namespace)
        if m.spec.cluster_name == cluster.name
    ]


def _incarnations(store: ObjectStore, cluster: Cluster, config_name: str) -> list[Machine]:
    """The stored Machines of the cluster standing for config entry ``config_name``: those labelled so,
    and the Machine of that exact name made before the label existed."""
    return sorted(
        (
            m
            for m in _cluster_machines(store, cluster)
            if m.metadata.labels.get(CONFIG_NAME_LABEL, m.name if m.name == config_name else None)
            == config_name
        ),
        key=lambda m: m.name,
    )


# -- what the config wants ---------------------------------------------------------------------------------
def _mutable_fields(obj: KubeObject) -> tuple[str, ...]:
    return tuple(getattr(type(obj), "MUTABLE_SPEC_FIELDS", ()))


def _spec_of(obj: KubeObject, drop: Sequence[str] = ()) -> dict[str, Any]:
    spec = getattr(obj, "spec", None)
    if spec is None:
        return {}
    return without(spec, drop)


def replacement_name(machine: Machine, infra: KubeObject) -> str:
    """``<config name>-<hash>``: the hash covers what a replace carries out (the infrastructure machine's
    spec, less the fields an update may change in place, and the Machine's spec, less the names), so the
    same config always names the same replacement and a re-run finds it."""
    config_name = machine.metadata.labels.get(CONFIG_NAME_LABEL, machine.metadata.name)
    machine_spec = _spec_of(machine, ("providerID",))
    machine_spec.get("infrastructureRef", {}).pop("name", None)
    canonical = json.dumps(
        {
            "infrastructure": {"kind": infra.KIND, "spec": _spec_of(infra, _mutable_fields(infra))},
            "machine": machine_spec,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return f"{config_name}-{hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]}"


def named_pair(entry: ConfigMachine, name: str, infra_name: str) -> tuple[Machine, KubeObject]:
    """The config's Machine and infrastructure machine under the given names, labelled, the Machine pointing
    at that infrastructure machine."""
    machine = entry.machine.model_copy(deep=True)
    infra = entry.infra.model_copy(deep=True)
    machine.metadata.name = name
    infra.metadata.name = infra_name
    machine.spec.infrastructure_ref.name = infra_name
    for obj in (machine, infra):
        obj.metadata.labels[CONFIG_NAME_LABEL] = entry.name
    return machine, infra


def _unchanged(store: ObjectStore, entry: ConfigMachine, current: Machine) -> bool:
    """Whether ``current`` (not being deleted) already is what the config wants, apart from the fields an
    update changes in place (tags)."""
    if current.being_deleted:
        return False
    infra = stored_infra(store, current)
    if infra is None or infra.being_deleted or infra.KIND != entry.infra.KIND:
        return False
    desired_machine, desired_infra = named_pair(entry, current.name, infra.name)
    mutable = _mutable_fields(infra)
    merged_infra = merge_manifest(infra, desired_infra)
    if _spec_of(merged_infra, mutable) != _spec_of(infra, mutable):
        return False
    return _spec_of(merge_manifest(current, desired_machine)) == _spec_of(current)


@dataclass(frozen=True)
class MachinePlan:
    step: RolloutStep
    keep: str | None
    """The Machine name the config entry ends up as."""
    retire: list[Machine]
    """Stored incarnations to delete once ``keep`` is ready."""


def plan_machine(store: ObjectStore, cluster: Cluster, entry: ConfigMachine) -> MachinePlan:
    found = _incarnations(store, cluster, entry.name)
    if not found:
        return MachinePlan(RolloutStep("create", entry.name, None, entry.name), entry.name, [])
    if len(found) == 1 and _unchanged(store, entry, found[0]):
        return MachinePlan(RolloutStep("unchanged", entry.name, found[0].name, None), found[0].name, [])
    machine, infra = named_pair(entry, entry.name, entry.infra.name)
    new = replacement_name(machine, infra)
    retire = [m for m in found if m.name != new]
    old = ", ".join(m.name for m in retire) or None
    return MachinePlan(RolloutStep("replace", entry.name, old, new), new, retire)


def plan_deployment(store: ObjectStore, deployment: MachineDeployment) -> RolloutStep:
    """create (not stored), unchanged (its Machines' template is the same) or replace (the MachineDeployment
    controller replaces its Machines): ``old`` the stored MachineSets of other templates still wanting
    Machines, ``new`` the MachineSet of the config's template once it exists (the controller names a new one
    ``<deployment>-<random suffix>``)."""
    defaulted = deployment.model_copy(deep=True)
    defaulted.prepare_for_create()
    digest = template_hash(defaulted.spec.template)
    stored = get_or_none(store, MachineDeployment, deployment.name, deployment.metadata.namespace)
    if stored is None:
        return RolloutStep("create", deployment.name, None, None)
    if template_hash(stored.spec.template) == digest:
        return RolloutStep("unchanged", deployment.name, None, None)
    sets = [
        s
        for s in store.list(MachineSet, namespace=deployment.metadata.namespace)
        if any(r.uid == stored.metadata.uid and r.controller for r in s.metadata.owner_references)
        and not s.being_deleted
    ]
    old = sorted(s.name for s in sets if template_of(s) != digest and (s.spec.replicas or 0) > 0)
    new = next((s.name for s in sets if template_of(s) == digest), None)
    return RolloutStep("replace", deployment.name, ", ".join(old) or None, new)


def current_set(store: ObjectStore, deployment: MachineDeployment) -> str | None:
    """The name of the stored MachineSet of the MachineDeployment's current template."""
    stored = get_or_none(store, MachineDeployment, deployment.name, deployment.metadata.namespace)
    if stored is None:
        return None
    digest = template_hash(stored.spec.template)
    return next(
        (
            s.name
            for s in store.list(MachineSet, namespace=deployment.metadata.namespace)
            if any(r.uid == stored.metadata.uid and r.controller for r in s.metadata.owner_references)
            and template_of(s) == digest
            and not s.being_deleted
        ),
        None,
    )


def retired_machines(store: ObjectStore, cluster: Cluster, config: _Config) -> list[Machine]:
    """Stored Machines of the cluster whose config entry is gone from the config."""
    wanted = {m.name for m in config.machines}
    return [
        m
        for m in sorted(_cluster_machines(store, cluster), key=lambda m: m.name)
        if CONFIG_NAME_LABEL in m.metadata.labels and m.metadata.labels[CONFIG_NAME_LABEL] not in wanted
    ]


# -- checks and plans --------------------------------------------------------------------------------------
def checked_config(store: ObjectStore, objects: Sequence[KubeObject]) -> tuple[_Config, Cluster]:
    config = _read_config(objects)
    problems = list(config.problems)
    stored_cluster: Cluster | None = None
    if config.cluster is not None:
        stored_cluster = get_or_none(store, Cluster, config.cluster.name, config.namespace)
        if stored_cluster is None:
            problems.append(f"{config.cluster.ref()}: not in the store (create the cluster first)")
        elif stored_cluster.being_deleted:
            problems.append(f"{config.cluster.ref()}: being deleted")
        for entry in config.machines:
            same_name = get_or_none(store, Machine, entry.machine.name, entry.machine.namespace)
            if same_name is not None and same_name.spec.cluster_name != config.cluster.name:
                problems.append(
                    f"{entry.machine.ref()}: spec.clusterName: the stored machine of this name belongs to "
                    f"cluster {same_name.spec.cluster_name!r}"
                )
    try:
        refuse_immutable_changes(store, config.others)
    except Invalid as exc:
        problems.append(str(exc))
    if problems or stored_cluster is None:
        raise UpgradeRefused(problems)
    return config, stored_cluster


def check_upgrade(store: ObjectStore, objects: Sequence[KubeObject]) -> None:
    """Raise UpgradeRefused naming every problem before anything is written: immutable changes to
    cluster-level objects (Cluster, AWSCluster, TinkerbellCluster, ...), a Machine whose clusterName is not
    the Cluster's, a Machine without its infrastructure object in ``objects``, the cluster missing from the
    store."""
    checked_config(store, objects)


def plan_rollout(store: ObjectStore, objects: Sequence[KubeObject]) -> list[RolloutStep]:
    """What :func:`roll_out` would do, in order, without writing anything (UpgradeRefused as
    :func:`check_upgrade`)."""
    config, cluster = checked_config(store, label_machines(objects))
    steps = [plan_machine(store, cluster, entry).step for entry in config.machines]
    steps += [plan_deployment(store, d) for d in config.deployments]
    steps += [
        RolloutStep("delete", m.metadata.labels[CONFIG_NAME_LABEL], m.name, None)
        for m in retired_machines(store, cluster, config)
    ]
    return steps
