"""Upgrade Cluster: bringing a stored cluster to a new config, rolling its machines one at a time.

A cluster config (a Cluster, its infrastructure cluster, bootstrap Secrets, Machines and their
infrastructure machines, maybe Hardware or templates) is applied to a cluster that already exists. Most of
an infrastructure machine's spec cannot change on a live machine (an instance keeps its type, a bare-metal
machine its hardware), so a machine whose spec changed is *replaced*: a new Machine and infrastructure
machine are created beside the old ones, and only once both are ready is the old pair deleted. Machines are
rolled one at a time, control-plane machines first, so the cluster never loses more than one machine's
capacity.

A cluster whose workers are a MachineDeployment (with its infrastructure machine template) rolls them through
it instead: once the config's own Machines are done, each changed MachineDeployment is applied and the
MachineDeployment controller replaces its Machines (one MachineSet per template, within ``maxSurge`` and
``maxUnavailable``); the rollout waits until every Machine of it runs the new template and is ready. A
changed Machine template is a new template object (a template's spec is not changed in place, as in Cluster
API): the MachineDeployment names the new one.

Every step is safe to repeat after the process is killed at any point: a replacement's name is derived from
the desired spec (``<config name>-<hash>``), so a re-run finds the replacement an interrupted run made
instead of making another, and every machine carries :data:`CONFIG_NAME_LABEL`, so the machine a config
entry stands for is found whatever it is called now.

The module is provider-neutral: it works on Machines and whatever kinds their ``spec.infrastructureRef``
names (AWSMachine, TinkerbellMachine). The controllers that do the work run elsewhere (other threads or
processes): waits go through a :data:`WaitFn`, by default :func:`controllers.observe.observe`. The plan
(reading the config, checking it, the steps) is :mod:`capa_app.rollout_plan`; this module carries it out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence

from capa_app.rollout_plan import (
    CONFIG_NAME_LABEL,
    ConfigMachine,
    Goal,
    RolloutError,
    UpgradeRefused,
    WaitFn,
    check_upgrade,
    checked_config,
    current_set,
    label_machines,
    named_pair,
    plan_deployment,
    plan_machine,
    plan_rollout,
    replacement_name,
    retired_machines,
    stored_infra,
)
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.machinesets import MachineDeployment
from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.operations import apply_objects
from capa_py.store.errors import NotFound
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore
from capa_py.workflow.provider import RolloutStep, StepPhase
from controllers.observe import observe, observed_readiness
from controllers.run import ConvergeResult

_log = get_logger("workflow.rollout")


# -- rolling out -------------------------------------------------------------------------------------------
def _ready(objects: Iterable[KubeObject]) -> bool:
    return all(observed_readiness(o) == "ready" for o in objects)


def _describe_wait(result: ConvergeResult, goal: Goal) -> str:
    states = ", ".join(f"{ref}: {state}" for ref, state in result.states.items())
    why = "; ".join(f"{ref} is blocked: {b.reason}: {b.message}" for ref, b in result.blocked.items())
    failures = []
    for obj in result.objects:
        failure = obj.failure()
        if failure is not None:
            failures.append(f"{obj.ref()} failed: {failure[0]}: {failure[1] or ''}".rstrip(": "))
    ending = "timed out" if result.timed_out else "stopped"
    detail = "; ".join(p for p in (why, "; ".join(failures)) if p)
    return f"waiting for {goal} {ending} after {result.elapsed:.0f}s ({states})" + (
        f": {detail}" if detail else ""
    )


class _Rollout:
    def __init__(
        self,
        store: ObjectStore,
        timeout: float,
        wait: WaitFn | None,
        on_step: Callable[[RolloutStep, StepPhase], None] | None,
    ) -> None:
        self.store = store
        self.deadline = time.monotonic() + timeout
        self.wait_fn = wait if wait is not None else self._observe
        self.on_step = on_step

    def _observe(self, targets: Sequence[KubeObject], goal: Goal, timeout: float) -> ConvergeResult:
        return observe(self.store, targets, goal, timeout)

    def wait(self, targets: Sequence[KubeObject], goal: Goal) -> None:
        remaining = max(0.0, self.deadline - time.monotonic())
        result = self.wait_fn(targets, goal, remaining)
        if not result.converged:
            raise RolloutError(_describe_wait(result, goal))

    def report(self, step: RolloutStep, phase: StepPhase) -> None:
        _log.info(
            "rollout step", action=step.action, machine=step.machine, old=step.old, new=step.new, phase=phase
        )
        if self.on_step is not None:
            self.on_step(step, phase)

    def retire(self, machines: Sequence[Machine]) -> None:
        """Delete the machines (their infrastructure machines too: the Machine controller deletes those of
        a Machine it finalizes, this does it for one already gone) and wait until every one is gone."""
        targets: list[KubeObject] = []
        for machine in machines:
            infra = stored_infra(self.store, machine)
            targets += [machine] if infra is None else [machine, infra]
            if not machine.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(Machine, machine.name, machine.namespace)
            still_there = get_or_none(self.store, Machine, machine.name, machine.namespace)
            if infra is not None and still_there is None:
                # No finalizer held the Machine back (never reconciled): nothing will delete its infra.
                with contextlib.suppress(NotFound):
                    self.store.delete(type(infra), infra.name, infra.namespace)
        self.wait(targets, "gone")

    def machine(self, cluster: Cluster, entry: ConfigMachine) -> RolloutStep:
        plan = plan_machine(self.store, cluster, entry)
        step = plan.step
        self.report(step, "started")
        if step.action == "unchanged":
            current = self.store.get(Machine, step.old or entry.name, cluster.metadata.namespace)
            infra = stored_infra(self.store, current)
            machine, desired_infra = named_pair(
                entry, current.name, infra.name if infra else entry.infra.name
            )
            applied = apply_objects(self.store, [desired_infra, machine])
            # Rolling the next machine while this one is down would take two out of service at once.
            if any(a.outcome != "unchanged" for a in applied) or not _ready(a.object for a in applied):
                self.wait([machine, desired_infra], "ready")
        else:
            name = plan.keep or entry.name
            # A create keeps the config's names; a replacement's infrastructure machine takes the Machine's.
            infra_name = entry.infra.name if step.action == "create" else name
            machine, infra = named_pair(entry, name, infra_name)
            for obj in (machine, infra):
                stale = get_or_none(self.store, type(obj), obj.name, obj.namespace)
                if stale is not None and stale.being_deleted:
                    # The name of an earlier roll being torn down: let it go before making it anew.
                    self.wait([stale], "gone")
            apply_objects(self.store, [infra, machine])
            self.wait([machine, infra], "ready")
            if plan.retire:
                self.retire(plan.retire)
        self.report(step, "finished")
        return step

    def deployment(self, deployment: MachineDeployment) -> RolloutStep:
        """Apply the MachineDeployment and wait until every Machine of it runs its template and is ready
        (the MachineDeployment controller rolls them)."""
        step = plan_deployment(self.store, deployment)
        self.report(step, "started")
        applied = apply_objects(self.store, [deployment])
        self.wait([a.object for a in applied], "ready")
        if step.action != "unchanged":
            # The MachineSet now holding the Machines (made during the wait when the template was new).
            step = dataclasses.replace(step, new=current_set(self.store, deployment))
        self.report(step, "finished")
        return step

    def delete(self, machine: Machine) -> RolloutStep:
        step = RolloutStep("delete", machine.metadata.labels[CONFIG_NAME_LABEL], machine.name, None)
        self.report(step, "started")
        self.retire([machine])
        self.report(step, "finished")
        return step


def roll_out(
    store: ObjectStore,
    objects: Sequence[KubeObject],
    *,
    timeout: float,
    wait: WaitFn | None = None,
    on_step: Callable[[RolloutStep, StepPhase], None] | None = None,
) -> list[RolloutStep]:
    """Bring the stored cluster to ``objects``: apply the cluster-level objects and wait for the cluster,
    then create, replace (new machine ready before the old is deleted) or keep each machine, one at a time,
    control-plane machines first, then apply each MachineDeployment and wait for its rollout, then delete
    the machines the config no longer has.

    ``timeout`` bounds the whole rollout (every wait gets what is left of it); ``wait`` waits for objects
    reconciled elsewhere (:func:`controllers.observe.observe` by default); ``on_step`` hears each step start
    and finish. UpgradeRefused before anything is written; RolloutError when a wait does not converge.
    """
    labelled = label_machines(objects)
    config, cluster = checked_config(store, labelled)
    run = _Rollout(store, timeout, wait, on_step)
    apply_objects(store, config.others)
    assert config.cluster is not None  # checked_config refused a config without one
    run.wait([o for o in (config.cluster, config.infra_cluster) if o is not None], "ready")
    steps = [run.machine(cluster, entry) for entry in config.machines]
    steps += [run.deployment(d) for d in config.deployments]
    steps += [run.delete(m) for m in retired_machines(store, cluster, config)]
    return steps


__all__ = [
    "CONFIG_NAME_LABEL",
    "Goal",
    "RolloutError",
    "UpgradeRefused",
    "WaitFn",
    "check_upgrade",
    "label_machines",
    "plan_rollout",
    "replacement_name",
    "roll_out",
]
