"""The SQLite store keeps the Kubernetes API's object semantics: identity, versions, generation, status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capa_py.api import AWSCluster, Cluster, KindRegistry, Machine, Secret
from capa_py.store import AlreadyExists, Conflict, Invalid, NotFound, SQLiteStore
from capa_py.store.protocol import WatchEvent


def new_cluster(name: str = "demo", **labels: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "labels": labels}})


def new_aws_cluster(name: str = "demo", subnets: list[dict[str, str]] | None = None) -> AWSCluster:
    return AWSCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "region": "us-east-1",
                "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}, "subnets": subnets or []},
            },
        }
    )


def events_since(store: SQLiteStore, kind: type[Cluster], resource_version: str) -> list[WatchEvent[Cluster]]:
    """Every event recorded after ``resource_version``, without waiting for more."""
    return list(store.watch(kind, resource_version=resource_version, timeout=0))


# -- create --------------------------------------------------------------------------------------------


def test_create_assigns_uid_creation_timestamp_generation_and_resource_version(store: SQLiteStore) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    created = store.create(new_cluster())

    meta = created.metadata
    assert meta.uid, "create must assign a uid"
    assert meta.resource_version, "create must assign a resourceVersion"
    assert meta.generation == 1, f"a new object starts at generation 1, got {meta.generation}"
    assert meta.creation_timestamp is not None, "create must set creationTimestamp"
    assert meta.creation_timestamp >= before, "creationTimestamp must be the time of the create"
    assert meta.namespace == "default", "a namespaced object without namespace lands in 'default'"
    assert store.get(Cluster, "demo") == created, "get must return exactly what create returned"


def test_create_ignores_client_supplied_identity_and_deletion_fields(store: SQLiteStore) -> None:
    cluster = new_cluster()
    cluster.metadata.uid = "forged"
    cluster.metadata.resource_version = "999"
    cluster.metadata.generation = 7
    cluster.metadata.deletion_timestamp = datetime(2020, 1, 1, tzinfo=UTC)

    created = store.create(cluster)

    assert created.metadata.uid != "forged", "the store, not the client, assigns the uid"
    assert created.metadata.resource_version != "999"
    assert created.metadata.generation == 1
    assert created.metadata.deletion_timestamp is None, "a create cannot start out deleted"


def test_create_drops_status(store: SQLiteStore) -> None:
    cluster = new_cluster()
    cluster.status.phase = "Provisioned"
    cluster.status.infrastructure_ready = True

    created = store.create(cluster)

    assert created.status.phase is None, "status is a subresource: a create must not set it"
    assert created.status.infrastructure_ready is False


def test_create_with_generate_name_picks_a_unique_name(store: SQLiteStore) -> None:
    first = store.create(Cluster.model_validate({"metadata": {"generateName": "demo-"}}))
    second = store.create(Cluster.model_validate({"metadata": {"generateName": "demo-"}}))

    assert first.name.startswith("demo-"), f"generated name {first.name!r} must start with the prefix"
    assert first.name != second.name, "two generateName creates must get different names"


def test_create_of_a_taken_name_raises_already_exists(store: SQLiteStore) -> None:
    store.create(new_cluster())
    with pytest.raises(AlreadyExists, match="demo already exists"):
        store.create(new_cluster())


def test_same_name_in_another_namespace_is_another_object(store: SQLiteStore) -> None:
    store.create(new_cluster())
    other = new_cluster()
    other.metadata.namespace = "team-b"
    store.create(other)

    assert [c.namespace for c in store.list(Cluster)] == ["default", "team-b"]
    assert [c.namespace for c in store.list(Cluster, namespace="team-b")] == ["team-b"]


def test_secret_string_data_is_folded_into_data_on_write(store: SQLiteStore) -> None:
    secret = Secret.model_validate({"metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/sh"}})

    created = store.create(secret)

    assert created.string_data == {}, "stringData is write-only, as in Kubernetes"
    assert created.value("value") == b"#!/bin/sh"
    assert created.metadata.generation is None, "kinds without a status subresource have no generation"


def test_cluster_scoped_kinds_ignore_namespaces(tmp_path: Path) -> None:
    registry = KindRegistry()
    region = registry.define("example.com/v1", "Region", namespaced=False)
    with SQLiteStore(tmp_path / "scoped.db", registry=registry) as scoped:
        created = scoped.create(region.model_validate({"metadata": {"name": "eu", "namespace": "ignored"}}))

        assert created.namespace is None, "a cluster-scoped object has no namespace"
        assert scoped.get(region, "eu", namespace="anything") == created
        assert [r.name for r in scoped.list(region, namespace="anything")] == ["eu"]


def test_a_kind_the_store_does_not_know_is_invalid(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "empty.db", registry=KindRegistry()) as bare:
        with pytest.raises(Invalid) as caught:
            bare.create(new_cluster())
        assert caught.value.field == "kind"
        with pytest.raises(Invalid):
            bare.list(Cluster)


# -- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Upper", "under_score", "-leading", "trailing-", "a" * 254])
def test_create_rejects_an_invalid_name_naming_the_field(store: SQLiteStore, name: str) -> None:
    cluster = new_cluster()
    cluster.metadata.name = name  # bypasses model validation, as a hand-built object could
    with pytest.raises(Invalid) as caught:
        store.create(cluster)
    assert caught.value.field == "metadata.name", f"Invalid must name metadata.name, got {caught.value}"


def test_create_without_a_name_is_invalid(store: SQLiteStore) -> None:
    with pytest.raises(Invalid) as caught:
        store.create(Cluster())
    assert caught.value.field == "metadata.name"


@pytest.mark.parametrize(
    ("key", "value"),
    [("bad key", "x"), ("ok", "bad value!"), ("UPPER.example.com/x", "v"), ("k", "x" * 64)],
)
def test_write_rejects_an_invalid_label_naming_the_field(store: SQLiteStore, key: str, value: str) -> None:
    cluster = new_cluster()
    cluster.metadata.labels[key] = value
    with pytest.raises(Invalid) as caught:
        store.create(cluster)
    assert caught.value.field == "metadata.labels", f"Invalid must name metadata.labels, got {caught.value}"

    stored = store.create(new_cluster())
    stored.metadata.labels[key] = value
    with pytest.raises(Invalid) as caught:
        store.update(stored)
    assert caught.value.field == "metadata.labels", "update must validate labels as create does"


def test_write_rejects_an_out_of_range_field_with_its_camel_case_path(store: SQLiteStore) -> None:
    cluster = new_cluster()
    cluster.spec.control_plane_endpoint.port = 70000
    with pytest.raises(Invalid) as caught:
        store.create(cluster)
    assert caught.value.field == "spec.controlPlaneEndpoint.port", f"wrong path in {caught.value}"


def test_write_rejects_semantic_problems_with_the_field_path(store: SQLiteStore) -> None:
    overlapping = new_aws_cluster(
        subnets=[
            {"cidrBlock": "10.0.0.0/24", "availabilityZone": "us-east-1a"},
            {"cidrBlock": "10.0.0.0/25", "availabilityZone": "us-east-1b"},
        ]
    )
    with pytest.raises(Invalid, match="overlaps") as caught:
        store.create(overlapping)
    assert caught.value.field == "spec.network.subnets[1].cidrBlock"


def test_update_status_validates_the_status(store: SQLiteStore) -> None:
    created = store.create(new_cluster())
    created.status.phase = "Exploded"  # type: ignore[assignment]  # not a Cluster phase
    with pytest.raises(Invalid) as caught:
        store.update_status(created)
    assert caught.value.field == "status.phase", f"wrong path in {caught.value}"


# -- get / list / not found ----------------------------------------------------------------------------


def test_get_update_and_delete_of_a_missing_object_raise_not_found(store: SQLiteStore) -> None:
    with pytest.raises(NotFound):
        store.get(Cluster, "missing")
    with pytest.raises(NotFound):
        store.update(new_cluster("missing"))
    with pytest.raises(NotFound):
        store.update_status(new_cluster("missing"))
    with pytest.raises(NotFound):
        store.delete(Cluster, "missing")


def test_kinds_are_kept_apart(store: SQLiteStore) -> None:
    store.create(new_cluster("same"))
    with pytest.raises(NotFound):
        store.get(AWSCluster, "same")
    assert store.list(AWSCluster) == []


def test_list_returns_a_resource_version_to_watch_from(store: SQLiteStore) -> None:
    created = store.create(new_cluster())
    listed = store.list(Cluster)
    assert listed.resource_version == created.metadata.resource_version
    assert [c.name for c in listed] == ["demo"]


# -- resourceVersion and optimistic concurrency --------------------------------------------------------


def test_resource_version_changes_on_every_write(store: SQLiteStore) -> None:
    seen = []
    cluster = store.create(new_cluster())
    seen.append(cluster.metadata.resource_version)
    cluster.metadata.labels["step"] = "one"
    cluster = store.update(cluster)
    seen.append(cluster.metadata.resource_version)
    cluster.status.phase = "Provisioning"
    cluster = store.update_status(cluster)
    seen.append(cluster.metadata.resource_version)
    cluster.metadata.finalizers = ["test/hold"]
    cluster = store.update(cluster)
    seen.append(cluster.metadata.resource_version)
    deleting = store.delete(Cluster, "demo")
    assert deleting is not None
    seen.append(deleting.metadata.resource_version)

    assert len(set(seen)) == len(seen), f"every write needs a new resourceVersion, got {seen}"
    assert [int(rv) for rv in seen] == sorted(int(rv) for rv in seen), "resourceVersions must increase"


@pytest.mark.parametrize("write", ["update", "update_status"])
def test_a_write_with_a_stale_resource_version_raises_conflict(store: SQLiteStore, write: str) -> None:
    stale = store.create(new_cluster())
    fresh = stale.model_copy(deep=True)
    fresh.metadata.labels["by"] = "other-writer"
    store.update(fresh)

    stale.metadata.annotations["lost"] = "update"
    stale.status.phase = "Failed"
    with pytest.raises(Conflict, match="stale"):
        getattr(store, write)(stale)

    current = store.get(Cluster, "demo")
    assert "lost" not in current.metadata.annotations, "a conflicting write must not be applied"
    assert current.status.phase is None, "a conflicting status write must not be applied"


def test_a_write_without_resource_version_is_unconditional(store: SQLiteStore) -> None:
    stale = store.create(new_cluster())
    other = stale.model_copy(deep=True)
    other.metadata.labels["by"] = "other-writer"
    store.update(other)

    stale.metadata.resource_version = None
    stale.metadata.annotations["applied"] = "yes"
    updated = store.update(stale)

    assert updated.metadata.annotations == {"applied": "yes"}, "an update without rv must apply"
    stale.metadata.resource_version = None
    stale.status.phase = "Provisioned"
    assert store.update_status(stale).status.phase == "Provisioned", "update_status without rv must apply"


def test_a_write_for_a_recreated_object_fails_the_uid_precondition(store: SQLiteStore) -> None:
    old = store.create(new_cluster())
    store.delete(Cluster, "demo")
    store.create(new_cluster())

    old.metadata.resource_version = None
    old.metadata.labels["from"] = "old-incarnation"
    with pytest.raises(Conflict, match="uid"):
        store.update(old)


def test_a_no_op_update_keeps_the_resource_version_and_emits_no_event(store: SQLiteStore) -> None:
    created = store.create(new_cluster(app="web"))

    again = store.update(created.model_copy(deep=True))
    status_again = store.update_status(created.model_copy(deep=True))

    assert again.metadata.resource_version == created.metadata.resource_version, "no-op update wrote"
    assert status_again.metadata.resource_version == created.metadata.resource_version, "no-op status wrote"
    assert events_since(store, Cluster, created.metadata.resource_version or "") == [], (
        "a no-op write must not produce a watch event"
    )


# -- generation ----------------------------------------------------------------------------------------


def test_generation_increments_on_spec_changes_only(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster())

    cluster.metadata.labels["tier"] = "gold"
    cluster.metadata.annotations["note"] = "hello"
    cluster = store.update(cluster)
    assert cluster.metadata.generation == 1, "labels and annotations must not bump generation"

    cluster.status.phase = "Provisioning"
    cluster = store.update_status(cluster)
    assert cluster.metadata.generation == 1, "status writes must not bump generation"

    cluster.spec.paused = True
    cluster = store.update(cluster)
    assert cluster.metadata.generation == 2, "a spec change must bump generation"

    cluster.spec.control_plane_endpoint.host = "api.example.com"
    cluster.spec.control_plane_endpoint.port = 6443
    cluster = store.update(cluster)
    assert cluster.metadata.generation == 3, "each spec change bumps generation once"


def test_a_client_cannot_set_generation_or_creation_timestamp(store: SQLiteStore) -> None:
    created = store.create(new_cluster())
    forged = created.model_copy(deep=True)
    forged.metadata.generation = 42
    forged.metadata.creation_timestamp = datetime(2000, 1, 1, tzinfo=UTC)
    forged.metadata.labels["x"] = "y"

    updated = store.update(forged)

    assert updated.metadata.generation == 1
    assert updated.metadata.creation_timestamp == created.metadata.creation_timestamp


# -- the status subresource ----------------------------------------------------------------------------


def test_update_never_changes_status(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster())
    cluster.status.phase = "Provisioned"
    cluster = store.update_status(cluster)

    cluster.status.phase = "Failed"
    cluster.status.failure_message = "sneaked in through update"
    cluster.spec.paused = True
    updated = store.update(cluster)

    assert updated.spec.paused is True, "update must apply the spec"
    assert updated.status.phase == "Provisioned", "update must keep the stored status"
    assert updated.status.failure_message is None


def test_update_status_never_changes_spec_or_metadata(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster(app="web"))

    cluster.spec.paused = True
    cluster.metadata.labels = {"app": "changed"}
    cluster.metadata.annotations["sneaky"] = "yes"
    cluster.metadata.finalizers = ["test/hold"]
    cluster.status.phase = "Provisioning"
    updated = store.update_status(cluster)

    assert updated.status.phase == "Provisioning", "update_status must apply the status"
    assert updated.spec.paused is False, "update_status must keep the stored spec"
    assert updated.metadata.labels == {"app": "web"}, "update_status must keep the stored labels"
    assert updated.metadata.annotations == {}
    assert updated.metadata.finalizers == []


def test_update_status_on_a_kind_without_status_is_invalid(store: SQLiteStore) -> None:
    secret = store.create(Secret.model_validate({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
    with pytest.raises(Invalid, match="no status subresource"):
        store.update_status(secret)


def test_a_kind_without_status_subresource_updates_as_a_whole(store: SQLiteStore) -> None:
    secret = store.create(Secret.model_validate({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
    secret.string_data = {"k": "changed"}
    updated = store.update(secret)
    assert updated.value("k") == b"changed"


def test_machine_round_trips_aliased_fields(store: SQLiteStore) -> None:
    machine = Machine.model_validate(
        {
            "metadata": {"name": "m-0"},
            "spec": {
                "clusterName": "demo",
                "infrastructureRef": {"name": "m-0"},
                "providerID": "aws:///a/i-1",
            },
        }
    )
    stored = store.get(Machine, store.create(machine).name)
    assert stored.spec.provider_id == "aws:///a/i-1", "providerID must survive the store's wire form"


def test_timestamps_come_back_in_utc_whole_seconds(store: SQLiteStore) -> None:
    created = store.create(new_cluster())
    stamp = store.get(Cluster, "demo").metadata.creation_timestamp
    assert stamp is not None
    assert stamp.utcoffset() == timedelta(0), "timestamps are UTC"
    assert stamp.microsecond == 0, "timestamps have second precision, as metav1.Time"
    assert stamp == created.metadata.creation_timestamp
