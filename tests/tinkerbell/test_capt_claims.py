"""Claiming Hardware: machines racing over one SQLite store never hold the same Hardware, and a controller
that dies between any two of its writes leaves nothing that a restart does not finish or reuse.

Workflows are driven by hand through capa_py.tinkerbell.states, as the gRPC server would drive them.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.conditions import get_condition
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import (
    HardwareAffinity,
    HardwareAffinityTerm,
    LabelSelector,
    TinkerbellCluster,
    TinkerbellMachine,
    WeightedHardwareAffinityTerm,
)
from capa_py.operations import apply_objects
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.informer import CachedStore, Informer
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import Conflict
from capa_py.store.sqlite import SQLiteStore
from controllers.core import ClusterController, MachineController
from controllers.tinkerbell_capi import TinkerbellClusterController, TinkerbellMachineController
from tests.tinkerbell.capt_world import (
    NS,
    WAIT,
    bootstrap_data,
    cluster_objects,
    hardware,
    machine_objects,
    owner_of,
    prepared,
    reconcile_machine,
    run_workflow,
    running,
)


def _adopted(store: SQLiteStore, machines: list[str]) -> None:
    """Run Cluster API core and the TinkerbellCluster controller (not the machine controller) until every
    TinkerbellMachine belongs to its Machine and the TinkerbellCluster is ready."""
    manager = Manager(
        store,
        [
            ClusterController(store, (TinkerbellCluster,)),
            MachineController(store, (TinkerbellMachine,)),
            TinkerbellClusterController(store),
        ],
        workers=1,
    )

    def done() -> bool:
        owned = all(
            any(r.kind == "Machine" for r in store.get(TinkerbellMachine, m, NS).metadata.owner_references)
            for m in machines
        )
        return owned and store.get(TinkerbellCluster, "bm", NS).status.ready

    assert manager.run(until=done, timeout=WAIT)


def _setup(path: Path, machines: list[str], hardware_count: int) -> None:
    store = SQLiteStore(path)
    objects: list[KubeObject] = [*cluster_objects()]
    for name in machines:
        objects += machine_objects(name)
    objects += [hardware(f"hw-{i}", f"127.0.0.{40 + i}") for i in range(hardware_count)]
    apply_objects(store, objects)
    _adopted(store, machines)
    store.close()


def _owners(store: SQLiteStore) -> dict[str, str | None]:
    return {h.name: owner_of(h) for h in store.list(Hardware, namespace=NS)}


def _race_in_threads(path: Path, machines: list[str]) -> None:
    start = threading.Barrier(len(machines))
    failures: list[BaseException] = []

    def racer(name: str) -> None:
        try:
            reconcile_machine(path, name, start)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=racer, args=(m,)) for m in machines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT)
    assert not failures, failures


def _race_in_processes(path: Path, machines: list[str]) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(len(machines))
    processes = [context.Process(target=reconcile_machine, args=(path, m, start)) for m in machines]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=WAIT * 2)
    assert [p.exitcode for p in processes] == [0] * len(machines)


@pytest.mark.parametrize("racers", ["threads", "processes"])
def test_machines_racing_over_fewer_hardware_never_share_one(tmp_path: Path, racers: str) -> None:
    """Six machine controllers, each with its own connection to one SQLite file, start together and race
    for three Hardware."""
    path = tmp_path / "state.db"
    machines = [f"m{i}" for i in range(6)]
    _setup(path, machines, hardware_count=3)
    (_race_in_threads if racers == "threads" else _race_in_processes)(path, machines)
    store = SQLiteStore(path)
    owners = _owners(store)
    assert None not in owners.values(), f"every hardware is claimed: {owners}"
    assert len(set(owners.values())) == 3, f"no machine holds two hardware: {owners}"
    recorded = {m: store.get(TinkerbellMachine, m, NS).spec.hardware_name for m in machines}
    assert {hw: owner for owner, hw in recorded.items() if hw} == owners, (
        "each claim is recorded by its owner"
    )
    waiting = [m for m, hw in recorded.items() if hw is None]
    assert len(waiting) == 3
    for name in waiting:
        condition = get_condition(store.get(TinkerbellMachine, name, NS).status, "HardwareReady")
        assert condition is not None
        assert condition.reason == "NoHardwareAvailable"
    store.close()


class Interleaving:
    """A store through which one machine's claim of a Hardware is overtaken: just before its first
    Hardware update, another machine's reconcile runs to the end (and claims the same Hardware)."""

    def __init__(self, inner: SQLiteStore, meanwhile: Any) -> None:
        self.inner = inner
        self.meanwhile = meanwhile
        self.conflicts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, obj: Any) -> Any:
        if isinstance(obj, Hardware) and self.meanwhile is not None:
            run, self.meanwhile = self.meanwhile, None
            run()
        try:
            return self.inner.update(obj)
        except Conflict:
            self.conflicts += 1
            raise


def test_a_machine_that_loses_a_claim_selects_another_hardware(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _setup(path, ["m1", "m2"], hardware_count=2)
    store = SQLiteStore(path)
    other = TinkerbellMachineController(store)
    racing = Interleaving(store, lambda: other.reconcile(ObjectKey("TinkerbellMachine", NS, "m2")))
    TinkerbellMachineController(racing, EventRecorder(store)).reconcile(
        ObjectKey("TinkerbellMachine", NS, "m1")
    )  # type: ignore[arg-type]
    assert racing.conflicts == 1, "m1's claim of hw-0 was refused: m2 had claimed it"
    assert _owners(store) == {"hw-0": "m2", "hw-1": "m1"}
    assert store.get(TinkerbellMachine, "m1", NS).spec.hardware_name == "hw-1"
    store.close()


class Crash(Exception):
    """The controller process dies."""


class Crashing:
    """A store that dies right after its ``at``-th write (create, update, status update or delete): that
    write raises :class:`Crash` once made, and every later write raises it without being made."""

    def __init__(self, inner: SQLiteStore, at: int) -> None:
        self.inner = inner
        self.at = at
        self.writes = 0
        self.written: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, verb: str, obj_or_kind: Any, call: Any) -> Any:
        if self.writes >= self.at:
            raise Crash("the process is gone")
        result = call()
        self.writes += 1
        kind = obj_or_kind.KIND
        self.written.append(f"{verb} {kind}")
        if self.writes == self.at:
            raise Crash(f"after write {self.at}: {verb} {kind}")
        return result

    def create(self, obj: Any) -> Any:
        return self._write("create", obj, lambda: self.inner.create(obj))

    def update(self, obj: Any) -> Any:
        return self._write("update", obj, lambda: self.inner.update(obj))

    def update_status(self, obj: Any) -> Any:
        return self._write("status", obj, lambda: self.inner.update_status(obj))

    def delete(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        return self._write("delete", kind, lambda: self.inner.delete(kind, *args, **kwargs))


def _reconcile_until_crash(crashing: Crashing) -> None:
    """One reconcile of m1 that dies at the crash (a step's exception ends the pass either way: raised,
    or returned as the reconcile's error)."""
    # Events go to the store itself: they are not the state a restart resumes from.
    controller = TinkerbellMachineController(crashing, EventRecorder(crashing.inner))  # type: ignore[arg-type]
    try:
        result = controller.reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))
    except Crash:
        return
    assert isinstance(result.error, Crash), result


CREATE_WRITES = [
    "update TinkerbellMachine",  # the finalizer
    "update Hardware",  # the claim
    "update TinkerbellMachine",  # spec.hardwareName
    "update Hardware",  # user-data
    "create Template",
    "create Workflow",
    "status TinkerbellMachine",  # waiting for the workflow
]


@pytest.mark.parametrize("crash_after", range(1, len(CREATE_WRITES) + 1))
def test_a_restart_after_any_write_finishes_with_one_hardware(tmp_path: Path, crash_after: int) -> None:
    path = tmp_path / "state.db"
    _setup(path, ["m1"], hardware_count=2)
    store = SQLiteStore(path)
    crashing = Crashing(store, crash_after)
    _reconcile_until_crash(crashing)
    assert crashing.written == CREATE_WRITES[:crash_after]
    store.close()

    restarted = SQLiteStore(path)  # a new process: nothing kept in memory
    with running(restarted) as ctl:
        ctl.wait_for(lambda: prepared(restarted, "m1"), "the restarted controller prepares the workflow")
        run_workflow(restarted, "m1")
        ctl.wait_for(lambda: restarted.get(TinkerbellMachine, "m1", NS).status.ready, "the machine is ready")
    assert _owners(restarted) == {"hw-0": "m1", "hw-1": None}
    assert restarted.get(TinkerbellMachine, "m1", NS).spec.hardware_name == "hw-0"
    assert [w.name for w in restarted.list(Workflow, namespace=NS)] == ["m1"]
    assert [t.name for t in restarted.list(Template, namespace=NS)] == ["m1"]
    instance = restarted.get(Hardware, "hw-0", NS).spec.instance
    assert instance is not None
    assert instance.userdata == bootstrap_data("m1")
    assert restarted.get(Hardware, "hw-1", NS).spec.instance is None
    restarted.close()


def test_a_claim_left_by_a_crash_is_released_when_the_machine_is_deleted(tmp_path: Path) -> None:
    """The machine is deleted after its claim was written but before it was recorded."""
    path = tmp_path / "state.db"
    _setup(path, ["m1"], hardware_count=2)
    store = SQLiteStore(path)
    _reconcile_until_crash(Crashing(store, 2))
    assert _owners(store) == {"hw-0": "m1", "hw-1": None}
    assert store.get(TinkerbellMachine, "m1", NS).spec.hardware_name is None
    from capa_py.api.cluster import Machine

    store.delete(Machine, "m1", NS)
    with running(store) as ctl:
        ctl.wait_for(lambda: not store.list(TinkerbellMachine, namespace=NS), "the machine is gone")
    assert _owners(store) == {"hw-0": None, "hw-1": None}
    store.close()


def test_the_claim_ranks_the_hardware_stored_now_not_what_the_cache_has_seen(tmp_path: Path) -> None:
    """Hardware applied with the machines in one manifest reaches the controller's informer after the
    machine can: with the Hardware cache still holding only hw-0, the machine claimed hw-0 though it prefers
    hw-1 (rack b), as the bare-metal example's workers sometimes took a rack-a Hardware under load. The claim
    reads the Hardware as stored, as controller-runtime's API reader does."""
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    prefer_b = HardwareAffinity(
        preferred=[
            WeightedHardwareAffinityTerm(
                weight=50,
                hardware_affinity_term=HardwareAffinityTerm(
                    label_selector=LabelSelector(match_labels={"rack": "b"})
                ),
            )
        ]
    )
    apply_objects(
        store,
        [
            *cluster_objects(),
            *machine_objects("m1", affinity=prefer_b),
            hardware("hw-0", "127.0.0.40", {"rack": "a"}),
            hardware("hw-1", "127.0.0.41", {"rack": "b"}),
        ],
    )
    _adopted(store, ["m1"])
    lagging = Informer(store, Hardware, NS)
    lagging.record(store.get(Hardware, "hw-0", NS))  # the cache has seen hw-0 only
    cache = CachedStore(store, [lagging])

    TinkerbellMachineController(cache, EventRecorder(store)).reconcile(
        ObjectKey("TinkerbellMachine", NS, "m1")
    )  # type: ignore[arg-type]

    assert _owners(store) == {"hw-0": None, "hw-1": "m1"}
    store.close()


def test_a_create_pass_from_a_lagging_cache_makes_nothing_for_a_deleted_machine(tmp_path: Path) -> None:
    """Two reconcilers on one store (``capa delete --wait`` beside ``capa controller``): one deletes the
    machine (its Workflow, Template and Hardware claim, then the machine itself) while the other's cache
    still shows the machine alive. The other's create pass made a Workflow and a Template owned by a machine
    that no longer exists, and claimed Hardware for it, which nothing undid. The create pass now reads the
    machine as stored first."""
    store = SQLiteStore(tmp_path / "state.db")
    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-0", "127.0.0.40")])
    _adopted(store, ["m1"])
    key = ObjectKey("TinkerbellMachine", NS, "m1")
    controller = TinkerbellMachineController(store, EventRecorder(store))
    controller.reconcile(key)
    assert [w.name for w in store.list(Workflow, namespace=NS)] == ["m1"]
    alive = store.get(TinkerbellMachine, "m1", NS)  # what the other reconciler's cache keeps showing

    store.delete(TinkerbellMachine, "m1", NS)
    for _ in range(5):
        controller.reconcile(key)
    assert store.list(TinkerbellMachine, namespace=NS) == []
    assert store.list(Workflow, namespace=NS) == []

    lagging = Informer(store, TinkerbellMachine, NS)
    lagging.record(alive)
    TinkerbellMachineController(CachedStore(store, [lagging]), EventRecorder(store)).reconcile(key)  # type: ignore[arg-type]

    assert store.list(Workflow, namespace=NS) == []
    assert store.list(Template, namespace=NS) == []
    assert _owners(store) == {"hw-0": None}
    store.close()


class DeletedBeforeTemplate:
    """A store on which another reconciler deletes the machine (its whole delete pass) between this pass's
    read of the machine and its create of the Template: the last window of the lagging-cache race."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, obj: Any) -> Any:
        if isinstance(obj, Template):
            self.inner.delete(TinkerbellMachine, "m1", NS)
            other = TinkerbellMachineController(self.inner, EventRecorder(self.inner))
            for _ in range(5):
                other.reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))
            assert self.inner.list(TinkerbellMachine, namespace=NS) == [], (
                "the other pass deleted the machine"
            )
        return self.inner.create(obj)


def test_a_template_and_workflow_made_for_a_machine_deleted_meanwhile_are_collected(tmp_path: Path) -> None:
    """The machine, read as stored, is deleted by another reconciler before this pass creates its Template
    and Workflow: the store collects both at once, since their only owner is gone (before the store checked
    owners, both stayed for good)."""
    path = tmp_path / "state.db"
    _setup(path, ["m1"], hardware_count=1)
    store = SQLiteStore(path)
    controller = TinkerbellMachineController(DeletedBeforeTemplate(store), EventRecorder(store))  # type: ignore[arg-type]

    controller.reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))

    assert store.list(TinkerbellMachine, namespace=NS) == []
    assert store.list(Template, namespace=NS) == []
    assert store.list(Workflow, namespace=NS) == []
    store.close()


class DeletedBeforeClaim:
    """A store on which another reconciler deletes the machine (its whole delete pass, which releases what
    the machine holds) between this pass's read of the machine and its claim of a Hardware."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.deleted = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, obj: Any) -> Any:
        if isinstance(obj, Hardware) and owner_of(obj) == "m1" and not self.deleted:
            self.deleted = True
            self.inner.delete(TinkerbellMachine, "m1", NS)
            other = TinkerbellMachineController(self.inner, EventRecorder(self.inner))
            for _ in range(5):
                other.reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))
            assert self.inner.list(TinkerbellMachine, namespace=NS) == [], "deleted"
        return self.inner.update(obj)


def test_a_claim_made_for_a_machine_deleted_meanwhile_is_released(tmp_path: Path) -> None:
    """The machine, read as stored, is deleted by another reconciler (whose delete pass found no Hardware to
    release) before this pass claims a Hardware: the claim is released at once, not left labelled with a
    machine that is gone (before, nothing undid it, and the Hardware stayed taken for good)."""
    path = tmp_path / "state.db"
    _setup(path, ["m1"], hardware_count=1)
    store = SQLiteStore(path)
    racing = DeletedBeforeClaim(store)
    controller = TinkerbellMachineController(racing, EventRecorder(store))  # type: ignore[arg-type]

    controller.reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))

    assert racing.deleted, "the claim was never attempted"
    assert store.list(TinkerbellMachine, namespace=NS) == []
    assert _owners(store) == {"hw-0": None}
    assert store.list(Workflow, namespace=NS) == []
    store.close()
