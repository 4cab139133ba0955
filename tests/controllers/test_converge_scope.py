"""A wait for one cluster reconciles that cluster only: another cluster in the same store costs nothing.

The real controllers in-process, a real SQLite store, moto over HTTP. Each test builds the same cluster
("beta") twice — once in a store of its own, once beside a ready cluster ("alpha") — and compares what the
two waits cost and what they reconciled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capa_py.api.meta import KubeObject
from capa_py.runtime.queue import ObjectKey
from capa_py.store.sqlite import SQLiteStore
from controllers.run import ConvergeResult
from tests.controllers.conftest import Harness
from tests.controllers.test_reconcile_scope import example_named, keys_of

TIMEOUT = 120.0


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if o.KIND != "Secret"]


def _ready(
    harness: Harness, name: str, directory: Path
) -> tuple[ConvergeResult, Callable[[], ConvergeResult]]:
    """Apply the cluster ``name`` and wait until it is ready; also give a way to apply its file again."""
    objects = example_named(name, directory)

    def apply() -> ConvergeResult:
        result = harness.converge(_targets(harness.apply(objects)), timeout=TIMEOUT)
        assert result.converged, f"{name} did not become ready: {result.states}"
        return result

    return apply(), apply


def _mutating(result: ConvergeResult) -> dict[str, int]:
    from capa_py.aws.accounting import is_mutating

    return {op: n for op, n in result.calls.by_operation().items() if is_mutating(op.split(":", 1)[1])}


def _reconciled_of(result: ConvergeResult, name: str) -> set[ObjectKey]:
    return set(result.reconciled_keys) & keys_of(name)


def _names(result: ConvergeResult, name: str) -> list[str]:
    return sorted(str(key) for key in _reconciled_of(result, name))


def test_applying_one_cluster_beside_a_ready_one_never_reconciles_the_ready_one(
    harness: Harness, tmp_path: Path
) -> None:
    # Alone: beta in a store of its own, created then applied again (steady state).
    created_alone, reapply_alone = _ready(harness, "beta", tmp_path)
    steady_alone = reapply_alone()

    harness.store.close()
    harness.server.reset()
    harness.store = SQLiteStore(tmp_path / "two-clusters.db")
    alpha, _ = _ready(harness, "alpha", tmp_path)
    assert _reconciled_of(alpha, "alpha"), "alpha was never reconciled; the test is void"

    created, reapply = _ready(harness, "beta", tmp_path)
    assert not _reconciled_of(created, "alpha"), f"creating beta reconciled {_names(created, 'alpha')}"
    assert _reconciled_of(created, "beta") == keys_of("beta") - {
        ObjectKey("Secret", "default", "beta-bootstrap")
    }
    assert _mutating(created) == _mutating(created_alone), "beta's creation changed with alpha stored"

    steady = reapply()
    assert not _reconciled_of(steady, "alpha"), f"re-applying beta reconciled {_names(steady, 'alpha')}"
    assert steady.calls.by_operation() == steady_alone.calls.by_operation(), (
        "re-applying beta costs different AWS calls with alpha stored: "
        f"{steady.calls.by_operation()} vs alone {steady_alone.calls.by_operation()}"
    )
    assert steady.calls.total() > 0, "the steady-state apply made no AWS call; the comparison is void"


def test_deleting_one_cluster_leaves_the_other_unreconciled_and_ready(
    harness: Harness, tmp_path: Path
) -> None:
    _ready(harness, "alpha", tmp_path)
    created, _ = _ready(harness, "beta", tmp_path)
    beta = next(o for o in created.objects if o.KIND == "Cluster")
    last = harness.store.delete(type(beta), beta.name, beta.namespace)
    assert last is not None

    deleted = harness.converge([last], goal="gone", timeout=TIMEOUT)

    assert deleted.converged, deleted.states
    assert deleted.calls.total(mutating=True) > 0, "the deletion made no AWS call; the test is void"
    assert not _reconciled_of(deleted, "alpha"), f"deleting beta reconciled {_names(deleted, 'alpha')}"
    assert ObjectKey("AWSCluster", "default", "beta") in deleted.reconciled_keys
    alpha = next(o for o in harness.store.list(type(beta), namespace="default") if o.name == "alpha")
    assert alpha.status.phase == "Provisioned", alpha.status  # type: ignore[attr-defined]
