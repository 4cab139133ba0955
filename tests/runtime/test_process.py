"""The controller process on the SQLite store: workers that survive exceptions, metrics over HTTP, the
readiness probe following the informers, resync, graceful shutdown."""

from __future__ import annotations

import platform
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capa_app.cli.controller_flags import core_controllers_enabled
from capa_py.api import Cluster
from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result
from capa_py.runtime.endpoints import BindAddress, Endpoints, parse_bind_address
from capa_py.runtime.manager import Controller
from capa_py.runtime.process import ControllerProcess, ProcessOptions
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore, WatchEvent
from capa_py.store.protocol import ObjectStore
from tests.support.eventually import eventually

SAFETY_TIMEOUT = 30.0
"""Only turns a hang into a failure; nothing waits for it on a healthy machine."""


def cluster(name: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "namespace": "default"}})


class Flaky:
    """Reconciles Clusters; raises (not returns) on the first attempt for each name in ``raise_for``."""

    name = "flaky"
    kind = Cluster
    watched_kinds: Sequence[type[KubeObject]] = ()

    def __init__(self, store: ObjectStore, raise_for: Iterable[str] = ()) -> None:
        self.store = store
        self.raise_for = set(raise_for)
        self.done: dict[str, int] = {}
        self.attempts: dict[str, int] = {}
        self.blocker: threading.Event | None = None
        self.started = threading.Event()
        self._cond = threading.Condition()

    def reconcile(self, key: ObjectKey) -> Result:
        self.started.set()
        if self.blocker is not None:
            self.blocker.wait(SAFETY_TIMEOUT)
        self.store.get(Cluster, key.name, key.namespace)  # through the cache
        with self._cond:
            self.attempts[key.name] = self.attempts.get(key.name, 0) + 1
            first = self.attempts[key.name] == 1
        if first and key.name in self.raise_for:
            raise RuntimeError(f"boom on {key.name}")
        with self._cond:
            self.done[key.name] = self.done.get(key.name, 0) + 1
            self._cond.notify_all()
        return Result()

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        return ()

    def wait_done(self, *names: str, times: int = 1) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: all(self.done.get(n, 0) >= times for n in names), SAFETY_TIMEOUT
            )


@pytest.fixture
def built() -> list[Flaky]:
    return []


def start(
    store: SQLiteStore, holder: list[Flaky], raise_for: Iterable[str] = (), **options: object
) -> ControllerProcess:
    def build(cache: ObjectStore) -> Sequence[Controller]:
        controller = Flaky(cache, raise_for)
        holder.append(controller)
        return [controller]

    opts = ProcessOptions(default_concurrency=1, **options)  # type: ignore[arg-type]
    return ControllerProcess(store, build, opts)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_worker_survives_a_raising_reconcile_and_the_error_is_counted(
    store: SQLiteStore, built: list[Flaky]
) -> None:
    store.create(cluster("bad"))
    store.create(cluster("good"))
    process = start(store, built, raise_for=["bad"])
    process.start_informers()
    process.start_workers()
    try:
        controller = built[0]
        # One worker only: that it reconciles both, and "bad" again after its error, proves it survived.
        assert controller.wait_done("bad", "good")
        assert controller.attempts["bad"] == 2
        values = samples(process.metrics.render().decode())
        assert values[("controller_runtime_reconcile_errors_total", (("controller", "flaky"),))] == 1
        total = "controller_runtime_reconcile_total"
        assert values[(total, (("controller", "flaky"), ("result", "error")))] == 1
        assert values[(total, (("controller", "flaky"), ("result", "success")))] >= 2
        assert values[("workqueue_retries_total", (("name", "flaky"),))] == 1
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


def test_a_worker_survives_an_exception_around_the_reconcile(store: SQLiteStore, built: list[Flaky]) -> None:
    class BrokenBookkeeping(dict[ObjectKey, str]):
        calls = 0

        def pop(self, *args: object) -> str:  # type: ignore[override]
            BrokenBookkeeping.calls += 1
            if BrokenBookkeeping.calls == 1:
                raise RuntimeError("bookkeeping broke")
            return ""

    store.create(cluster("a"))
    process = start(store, built)
    built[0].final_state = BrokenBookkeeping()  # type: ignore[attr-defined]
    process.start_informers()
    process.start_workers()
    try:
        assert built[0].wait_done("a")
        store.create(cluster("b"))
        assert built[0].wait_done("b"), "the only worker must still be working"
        assert process.worker_failures == 1
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


def test_readyz_is_503_until_the_informers_sync_and_metrics_are_served(
    store: SQLiteStore, built: list[Flaky]
) -> None:
    store.create(cluster("a"))
    process = start(store, built)
    any_port = BindAddress("127.0.0.1", 0)
    endpoints = Endpoints(any_port, any_port, process.metrics.render, process.has_synced)
    endpoints.start()
    try:
        assert endpoints.probe_url is not None
        assert endpoints.metrics_url is not None
        assert fetch(f"{endpoints.probe_url}/readyz")[0] == 503
        assert fetch(f"{endpoints.probe_url}/healthz") == (200, "ok")
        process.start_informers()
        assert process.wait_for_sync(SAFETY_TIMEOUT)
        assert fetch(f"{endpoints.probe_url}/readyz") == (200, "ok")
        process.start_workers()
        assert built[0].wait_done("a")
        status, text = fetch(f"{endpoints.metrics_url}/metrics")
        assert status == 200
        values = samples(text)
        ok = values[("controller_runtime_reconcile_total", (("controller", "flaky"), ("result", "success")))]
        assert ok >= 1
        assert values[("workqueue_adds_total", (("name", "flaky"),))] >= 1
        assert values[("controller_runtime_reconcile_time_seconds_count", (("controller", "flaky"),))] >= 1
        assert ("workqueue_depth", (("name", "flaky"),)) in values
    finally:
        endpoints.stop()
        process.shutdown(SAFETY_TIMEOUT)


def test_resync_queues_every_object_again(store: SQLiteStore, built: list[Flaky]) -> None:
    store.create(cluster("a"))
    store.create(cluster("b"))
    process = start(store, built, sync_period=0)  # no timer: the test resyncs by hand
    process.start_informers()
    process.start_workers()
    try:
        assert built[0].wait_done("a", "b")
        assert process.resync() == 2
        assert built[0].wait_done("a", "b", times=2)
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


def test_shutdown_lets_a_reconcile_in_progress_finish(store: SQLiteStore, built: list[Flaky]) -> None:
    store.create(cluster("slow"))
    process = start(store, built)
    blocker = threading.Event()
    built[0].blocker = blocker
    process.start_informers()
    process.start_workers()
    assert built[0].started.wait(SAFETY_TIMEOUT)
    assert not process.shutdown(0.0), "the reconcile is still blocked: the grace period ran out"
    blocker.set()
    assert process.shutdown(SAFETY_TIMEOUT)
    assert built[0].done == {"slow": 1}, "the reconcile in progress finished"


def test_bind_addresses() -> None:
    assert parse_bind_address("127.0.0.1:8080") == BindAddress("127.0.0.1", 8080)
    assert parse_bind_address(":8080") == BindAddress("0.0.0.0", 8080)
    assert parse_bind_address("[::1]:0") == BindAddress("::1", 0)
    assert parse_bind_address("0") is None
    for bad in ("8080", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError, match=r"address|range"):
            parse_bind_address(bad)


def test_core_controllers_auto_follows_the_cluster_crd_provider_label(store: SQLiteStore) -> None:
    assert core_controllers_enabled(store, "auto"), "no CRD stored: run the core controllers"
    crd = store.create(
        CustomResourceDefinition.model_validate(
            {
                "metadata": {
                    "name": "clusters.cluster.x-k8s.io",
                    "labels": {"cluster.x-k8s.io/provider": "infrastructure-aws"},
                },
                "spec": {
                    "group": "cluster.x-k8s.io",
                    "names": {"plural": "clusters", "kind": "Cluster"},
                    "versions": [{"name": "v1beta1", "served": True, "storage": True}],
                },
            }
        )
    )
    assert core_controllers_enabled(store, "auto"), "our own CRD: still ours to run"
    crd.metadata.labels["cluster.x-k8s.io/provider"] = "cluster-api"
    store.update(crd)
    assert not core_controllers_enabled(store, "auto"), "Cluster API core is installed: it runs them"
    assert core_controllers_enabled(store, "on")
    assert not core_controllers_enabled(store, "off")


def test_workers_start_only_once_every_informer_has_synced(store: SQLiteStore, built: list[Flaky]) -> None:
    store.create(cluster("a"))
    process = start(store, built)
    stopped = threading.Event()
    stopped.set()
    # Nothing listed yet: reconciling now would read a partial cache, so no worker may start.
    assert process.start_workers(stopped) is False
    assert built[0].attempts == {}
    for informer in process.informers:
        informer.relist()  # synced, without watch threads
    try:
        assert process.start_workers() is True
        assert built[0].wait_done("a")
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


def test_resync_period_is_jittered_by_up_to_a_tenth(store: SQLiteStore, built: list[Flaky]) -> None:
    process = start(store, built, sync_period=600.0)
    periods = [process._next_resync() for _ in range(200)]
    assert all(600.0 <= p <= 660.0 for p in periods)
    assert len(set(periods)) > 1, "processes started together must not resync in step"


def test_the_manager_forgets_a_deleted_object(store: SQLiteStore, built: list[Flaky]) -> None:
    process = start(store, built)
    manager = process.manager
    obj = store.create(cluster("short-lived"))
    key = ObjectKey("Cluster", "default", "short-lived")
    manager.dispatch(WatchEvent("ADDED", obj, obj.metadata.resource_version or "1"))
    manager._settled[key] = 1
    manager.error_streaks[key] = (1, RuntimeError("x"))
    manager.dispatch(WatchEvent("DELETED", obj, "99"))
    # A long-running process must not keep something for every object it ever saw.
    assert key not in manager._seen
    assert key not in manager._settled
    assert key not in manager.error_streaks


def test_workers_start_on_demand_up_to_the_concurrency(store: SQLiteStore, built: list[Flaky]) -> None:
    process = start(store, built, concurrency={"flaky": 3})
    blocker = threading.Event()
    built[0].blocker = blocker
    process.start_informers()
    process.start_workers()
    try:
        # Nothing to reconcile: no worker thread at all (the process's threads follow its work).
        assert process.workers_started() == {"flaky": 0}
        assert not [t for t in threading.enumerate() if t.name.startswith("capa-flaky-worker")]
        for name in ("a", "b", "c", "d", "e"):
            store.create(cluster(name))
        # Five keys, every reconcile blocked: workers start until the limit, and no further.
        assert built[0].started.wait(SAFETY_TIMEOUT)
        with built[0]._cond:
            built[0]._cond.wait_for(lambda: process.workers_started()["flaky"] == 3, SAFETY_TIMEOUT)
        assert process.workers_started() == {"flaky": 3}
        blocker.set()
        assert built[0].wait_done("a", "b", "c", "d", "e")
        assert process.workers_started() == {"flaky": 3}
        names = sorted(t.name for t in threading.enumerate() if t.name.startswith("capa-flaky-worker"))
        assert names == ["capa-flaky-worker-0", "capa-flaky-worker-1", "capa-flaky-worker-2"]
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


def test_one_worker_is_enough_for_keys_coming_one_at_a_time(store: SQLiteStore, built: list[Flaky]) -> None:
    process = start(store, built, concurrency={"flaky": 4})
    process.start_informers()
    process.start_workers()
    try:
        queue = process.queues["Cluster"]
        for name in ("a", "b", "c"):
            store.create(cluster(name))
            assert built[0].wait_done(name)
            eventually(lambda: queue.waiting() == 1, "the worker waiting for the next key")
        # Each key found the first worker waiting: no second one was started.
        assert process.workers_started() == {"flaky": 1}
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_memory_is_handed_back_once_a_burst_ends(store: SQLiteStore, built: list[Flaky]) -> None:
    # An interval of an hour: the trim that follows comes from the end of the burst, not from the timer.
    process = start(store, built, concurrency={"flaky": 2}, trim_interval=3600.0)
    process.start_informers()
    process.start_workers()
    try:
        assert process.trimmer.trims == 0, "nothing reconciled yet: nothing to hand back"
        for name in ("a", "b", "c"):
            store.create(cluster(name))
        assert built[0].wait_done("a", "b", "c")
        # The last reconcile's end is followed by a trim (one may also have come in a pause between them).
        trimmer = process.trimmer
        eventually(lambda: trimmer.trims >= 1 and not trimmer.behind(), "a trim after the burst")
        trims = process.trimmer.trims
        assert not process.trimmer.check(), "no reconcile since the last trim: no other one"
        assert process.trimmer.trims == trims
    finally:
        assert process.shutdown(SAFETY_TIMEOUT)
