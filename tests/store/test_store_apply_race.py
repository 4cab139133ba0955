"""Two applies of one manifest at once: the one whose create loses the race applies over the winner's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capa_py.api import Cluster
from capa_py.api.loader import load_manifests
from capa_py.operations import apply_objects
from capa_py.store import NotFound, SQLiteStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


class CreatedMeanwhile:
    """The store, where another apply creates each object right after this one found it missing."""

    def __init__(self, inner: SQLiteStore, rival: SQLiteStore) -> None:
        self.inner = inner
        self.rival = rival
        self.raced: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, kind: Any, name: str, namespace: str | None = None) -> Any:
        try:
            return self.inner.get(kind, name, namespace)
        except NotFound:
            if f"{kind.KIND}/{name}" in self.raced:
                raise
            self.raced.append(f"{kind.KIND}/{name}")
            manifest = next(o for o in load_manifests([EXAMPLE]) if o.KIND == kind.KIND and o.name == name)
            apply_objects(self.rival, [manifest])
            raise


def test_an_apply_that_loses_the_create_race_applies_over_the_winner(store_path: Path) -> None:
    with SQLiteStore(store_path) as store, SQLiteStore(store_path) as rival:
        racing = CreatedMeanwhile(store, rival)
        applied = apply_objects(racing, load_manifests([EXAMPLE]))  # type: ignore[arg-type]

        assert len(racing.raced) == len(applied) == 9
        assert {a.outcome for a in applied} == {"unchanged"}, [(a.object.ref(), a.outcome) for a in applied]
        assert [c.name for c in store.list(Cluster)] == ["demo"]
