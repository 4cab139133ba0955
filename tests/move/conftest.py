"""Fixtures for move tests: two real SQLite stores and the example clusters applied to the first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from tests.controllers.conftest import example, harness, moto_with_amis  # noqa: F401 (shared fixtures)

ROOT = Path(__file__).resolve().parents[2]
AWS_EXAMPLE = ROOT / "examples" / "aws-cluster.yaml"
TINKERBELL_EXAMPLE = ROOT / "examples" / "tinkerbell-cluster.yaml"


def with_other_name(objects: list[KubeObject], old: str, new: str) -> list[KubeObject]:
    """The manifests with every occurrence of the cluster name ``old`` replaced (a second cluster)."""
    text = "\n---\n".join(__import__("json").dumps(o.to_dict()) for o in objects).replace(old, new)
    return [type(o).model_validate(__import__("json").loads(doc)) for o, doc in zip(objects, text.split("\n---\n"), strict=True)]


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "source.db")
    yield store
    store.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "target.db")
    yield store
    store.close()


def apply(store: SQLiteStore, path: Path) -> list[KubeObject]:
    return [a.object for a in apply_objects(store, load_manifests([path]))]
