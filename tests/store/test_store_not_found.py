"""A NotFound says which object is missing (``about``), on every store: the SQLite file, the kube store on
``capa serve`` and the kube store on the real kube-apiserver. A caller asking whether *its* object went
away compares ``about`` with its key; the message stays what it was."""

from __future__ import annotations

import pytest

from capa_py.api import Cluster
from capa_py.api.core import ConfigMap
from capa_py.api.workloads import ClusterRole
from capa_py.store.errors import NotFound, ObjectRef
from capa_py.store.protocol import ObjectStore


def _absent_cluster() -> Cluster:
    return Cluster.model_validate({"metadata": {"name": "absent", "namespace": "default"}})


def test_reading_a_missing_object_is_not_found_about_it(store: ObjectStore) -> None:
    with pytest.raises(NotFound) as raised:
        store.get(Cluster, "absent", "default")
    assert raised.value.about == ObjectRef("Cluster", "default", "absent")
    assert str(raised.value) == "Cluster default/absent not found"


def test_a_missing_cluster_scoped_object_has_no_namespace(store: ObjectStore) -> None:
    with pytest.raises(NotFound) as raised:
        store.get(ClusterRole, "absent-role")
    assert raised.value.about == ObjectRef("ClusterRole", "", "absent-role")
    assert str(raised.value) == "ClusterRole absent-role not found"


def test_writing_or_deleting_a_missing_object_is_not_found_about_it(store: ObjectStore) -> None:
    expected = ObjectRef("Cluster", "default", "absent")
    for write in (store.update, store.update_status):
        with pytest.raises(NotFound) as raised:
            write(_absent_cluster())
        assert raised.value.about == expected, write
    with pytest.raises(NotFound) as raised:
        store.delete(Cluster, "absent", "default")
    assert raised.value.about == expected


def test_a_namespace_defaults_to_default_in_what_is_missing(store: ObjectStore) -> None:
    with pytest.raises(NotFound) as raised:
        store.get(ConfigMap, "absent")
    assert raised.value.about == ObjectRef("ConfigMap", "default", "absent")
