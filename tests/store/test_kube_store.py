"""What the kube store adds to the store contract: how API errors map onto store errors, the identity every
client of one API server shares, and where it finds its server (a kubeconfig, the default chain)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from capa_py.api import AWSCluster, Cluster, Machine, Secret
from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.coordination import Lease
from capa_py.api.core import ConfigMap, Event, Namespace
from capa_py.api.meta import KubeObject
from capa_py.apiserver import RunningServer, start_in_thread
from capa_py.apiserver.namespaces import SYSTEM_NAMESPACES
from capa_py.store import (
    AlreadyExists,
    Conflict,
    Expired,
    Invalid,
    NotFound,
    ObjectList,
    SQLiteStore,
    Unavailable,
)
from capa_py.store.identity import (
    IDENTITY_NAME,
    IDENTITY_NAMESPACE,
    LEGACY_IDENTITY_NAMESPACE,
    identity_config_map,
)
from capa_py.store.kube import KubeStore, store_error
from tests.peers.cluster import PeerCluster
from tests.store.kube_support import api_client_for, purge


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "served.db", poll_interval=0.02) as opened:
        yield opened


@pytest.fixture
def running(sqlite: SQLiteStore) -> Iterator[RunningServer]:
    server = start_in_thread(sqlite, bookmark_interval=0.2)
    yield server
    server.stop()


@pytest.fixture
def kube(running: RunningServer) -> Iterator[KubeStore]:
    with KubeStore(api_client_for(running)) as store:
        yield store


def new_aws_cluster(name: str = "demo", region: str = "us-east-1") -> AWSCluster:
    return AWSCluster.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"region": region, "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
        }
    )


def status_error(code: int, reason: str, **details: object) -> ApiException:
    exc = ApiException(status=code, reason=reason)
    exc.body = json.dumps(
        {"kind": "Status", "code": code, "reason": reason, "message": "m", "details": details}
    )
    return exc


# -- errors --------------------------------------------------------------------------------------------


def test_the_servers_admission_failure_is_invalid_with_its_field_causes(kube: KubeStore) -> None:
    created = kube.create(new_aws_cluster())
    created.spec.region = "eu-west-1"  # valid on its own; the server refuses the change (immutable)

    with pytest.raises(Invalid) as caught:
        kube.update(created)

    assert caught.value.field == "spec.region", f"Invalid must name the field, got {caught.value}"
    assert [field for field, _ in caught.value.causes] == ["spec.region"], "the server's causes are kept"
    assert kube.get(AWSCluster, "demo").spec.region == "us-east-1"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (status_error(404, "NotFound"), NotFound),
        (status_error(409, "AlreadyExists"), AlreadyExists),
        (status_error(409, "Conflict"), Conflict),
        (status_error(422, "Invalid", causes=[{"field": "spec.x", "message": "bad"}]), Invalid),
        (status_error(410, "Expired"), Expired),
        (status_error(500, "InternalError"), Unavailable),
        (status_error(503, "ServiceUnavailable"), Unavailable),
        (status_error(429, "TooManyRequests"), Unavailable),
        (status_error(403, "Forbidden"), Unavailable),
    ],
)
def test_api_errors_map_onto_store_errors_by_code_and_reason(error: ApiException, expected: type) -> None:
    mapped = store_error(error, "Cluster default/demo", "https://api")
    assert type(mapped) is expected, f"{error.status} {error.reason} must map to {expected.__name__}"


def test_an_unreachable_server_is_unavailable() -> None:
    with KubeStore(api_client_for("http://127.0.0.1:1")) as store, pytest.raises(Unavailable):
        store.get(Cluster, "demo")


def test_fields_the_models_do_not_keep_are_dropped_on_read(kube: KubeStore) -> None:
    doc = {
        "apiVersion": Cluster.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": "demo", "managedFields": [{"manager": "kubectl"}], "selfLink": "/x"},
    }
    assert kube.to_model(Cluster, doc).name == "demo", "managedFields from a real server must not fail reads"


def test_fields_cluster_api_core_writes_that_the_models_lack_are_read_past(kube: KubeStore) -> None:
    """Cluster API core v1.13 serves a Machine at v1beta1 with ``spec.nodeDeletionTimeout`` and a Cluster with
    ``status.v1beta2``, which capa-py's models of those kinds do not have: the controller's informers failed
    on every event ("Extra inputs are not permitted") before they were read past, as a Go client reads
    them."""
    machine = {
        "apiVersion": Machine.API_VERSION,
        "kind": "Machine",
        "metadata": {"name": "worker-0", "namespace": "default"},
        "spec": {
            "clusterName": "demo",
            "nodeDeletionTimeout": "10s",
            "bootstrap": {"dataSecretName": "demo-bootstrap"},
            "infrastructureRef": {
                "apiVersion": AWSCluster.API_VERSION,
                "kind": "AWSMachine",
                "name": "worker-0",
            },
        },
        "status": {"phase": "Provisioned", "v1beta2": {"conditions": [{"type": "Ready", "status": "False"}]}},
    }
    read = kube.to_model(Machine, machine)
    assert read.spec.bootstrap.data_secret_name == "demo-bootstrap"
    assert read.status.phase == "Provisioned"
    cluster = {
        "apiVersion": Cluster.API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "status": {"infrastructureReady": True, "v1beta2": {"conditions": []}},
    }
    assert kube.to_model(Cluster, cluster).status.infrastructure_ready is True


# -- identity ------------------------------------------------------------------------------------------


def test_every_client_of_a_served_store_shares_its_identity(
    sqlite: SQLiteStore, running: RunningServer
) -> None:
    with KubeStore(api_client_for(running)) as one, KubeStore(api_client_for(running)) as two:
        assert one.uid == two.uid == sqlite.uid, "the file and its served form must be one store"
    recorded = sqlite.get(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    assert recorded.data["uid"] == sqlite.uid


def test_clients_racing_to_record_an_identity_agree_on_one(
    sqlite: SQLiteStore, running: RunningServer
) -> None:
    sqlite.delete(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    stores = [KubeStore(api_client_for(running)) for _ in range(6)]
    seen: list[str] = []
    barrier = threading.Barrier(len(stores))

    def ask(store: KubeStore) -> None:
        barrier.wait()
        seen.append(store.uid)

    threads = [threading.Thread(target=ask, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for store in stores:
        store.close()

    assert len(seen) == len(stores)
    assert len(set(seen)) == 1, f"every client must end up with the winner's identity, got {set(seen)}"
    assert sqlite.get(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE).data["uid"] == seen[0]


def test_an_identity_recorded_in_the_namespace_of_earlier_releases_is_carried_over(
    sqlite: SQLiteStore, running: RunningServer
) -> None:
    """Earlier releases kept the identity in ``capa-system`` (Cluster API Provider AWS's namespace); a store
    whose identity is only there keeps it, now recorded in capa-py's own namespace."""
    sqlite.delete(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    sqlite.create(Namespace.model_validate({"metadata": {"name": LEGACY_IDENTITY_NAMESPACE}}))
    legacy = identity_config_map("recorded-by-an-earlier-release")
    legacy.metadata.namespace = LEGACY_IDENTITY_NAMESPACE
    sqlite.create(legacy)
    with KubeStore(api_client_for(running)) as store:
        assert store.uid == "recorded-by-an-earlier-release"
    assert (
        sqlite.get(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE).data["uid"]
        == "recorded-by-an-earlier-release"
    )


def test_capa_serve_corrects_an_identity_config_map_that_disagrees(sqlite: SQLiteStore) -> None:
    sqlite.create(identity_config_map("someone-else"))
    server = start_in_thread(sqlite)
    try:
        assert sqlite.get(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE).data["uid"] == sqlite.uid
    finally:
        server.stop()


# -- finding the server --------------------------------------------------------------------------------


def write_kubeconfig(path: Path, running: RunningServer) -> Path:
    return running.write_kubeconfig(path)


def test_a_kubeconfig_names_the_server(tmp_path: Path, sqlite: SQLiteStore, running: RunningServer) -> None:
    sqlite.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    with KubeStore.from_kubeconfig(write_kubeconfig(tmp_path / "kubeconfig", running)) as store:
        assert [c.name for c in store.list(Cluster)] == ["demo"]


@pytest.mark.parametrize("content", [None, "not: [a kubeconfig", "apiVersion: v1\nkind: Config\n"])
def test_a_missing_or_broken_kubeconfig_is_unavailable(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(Unavailable, match="kubeconfig"):
        KubeStore.from_kubeconfig(path)


def test_the_default_chain_reads_kubeconfig_from_the_environment(
    tmp_path: Path, running: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", running)))
    with KubeStore.from_environment() as store:
        assert store.server == running.url


def test_the_default_chain_without_any_configuration_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(Unavailable, match="not in a cluster"):
        KubeStore.from_environment()


def test_deleting_a_built_in_kind_returns_its_last_state_as_sqlite_does(kube: KubeStore) -> None:
    created = kube.create(Secret.model_validate({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))

    last = kube.delete(Secret, "s")

    assert last is not None, "the server answers with a Status: the store must still return the object"
    assert last.metadata.uid == created.metadata.uid
    with pytest.raises(NotFound):
        kube.get(Secret, "s")


# -- the built-in kinds, each through its own API ------------------------------------------------------


def built_in_objects() -> list[KubeObject]:
    from capa_py.manifests.crds import crd_for

    return [
        Namespace.model_validate({"metadata": {"name": "team-a"}}),
        ConfigMap.model_validate(
            {"metadata": {"name": "settings", "namespace": "team-a"}, "data": {"k": "v"}}
        ),
        Event.model_validate(
            {
                "metadata": {"name": "demo.1", "namespace": "team-a"},
                "involvedObject": {"kind": "Cluster", "name": "demo", "namespace": "team-a"},
                "reason": "Created",
                "type": "Normal",
            }
        ),
        Lease.model_validate(
            {"metadata": {"name": "leader", "namespace": "team-a"}, "spec": {"holderIdentity": "a"}}
        ),
        CustomResourceDefinition.model_validate(crd_for(Cluster)),
    ]


@pytest.mark.parametrize("obj", built_in_objects(), ids=lambda o: o.KIND)
def test_a_built_in_kind_is_created_read_listed_updated_and_deleted(kube: KubeStore, obj: KubeObject) -> None:
    kind = type(obj)
    created = kube.create(obj)
    assert created.metadata.uid, f"{kind.KIND}: the server must assign a uid"
    read = kube.get(kind, obj.name, obj.namespace)
    # The server may write status meanwhile (it establishes a CustomResourceDefinition), nothing else.
    assert read.desired_state() == created.desired_state()
    assert read.metadata.uid == created.metadata.uid
    # The served store also has the Namespaces every API server makes for itself (default, kube-system...).
    listed = [o.name for o in kube.list(kind, obj.namespace) if o.name not in SYSTEM_NAMESPACES]
    assert listed == [obj.name]

    read.metadata.labels["touched"] = "yes"
    updated = kube.update(read)
    assert updated.metadata.labels["touched"] == "yes"
    assert updated.metadata.resource_version != read.metadata.resource_version

    last = kube.delete(kind, obj.name, obj.namespace)
    assert last is not None
    assert last.metadata.uid == created.metadata.uid
    with pytest.raises(NotFound):
        kube.get(kind, obj.name, obj.namespace)


# -- field selectors the server answers ----------------------------------------------------------------


class ListRecordingStore(SQLiteStore):
    """The served store, noting the field selector of every list the API server makes on it."""

    field_selectors: list[str | None]

    def list(  # type: ignore[override]
        self,
        kind: type[KubeObject],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[KubeObject]:
        self.field_selectors.append(field_selector)
        return super().list(kind, namespace, label_selector, field_selector)


def test_name_namespace_and_event_fields_are_selected_by_the_server(tmp_path: Path) -> None:
    served = ListRecordingStore(tmp_path / "served.db")
    served.field_selectors = []
    running = start_in_thread(served, bookmark_interval=0.2)
    try:
        with KubeStore(api_client_for(running)) as kube:
            for name in ("a", "b"):
                kube.create(Cluster.model_validate({"metadata": {"name": name}}))
                kube.create(
                    Event.model_validate(
                        {
                            "metadata": {"name": f"e-{name}", "namespace": "default"},
                            "involvedObject": {"kind": "Cluster", "name": name},
                        }
                    )
                )
            served.field_selectors.clear()
            by_name = kube.list(Cluster, field_selector=".metadata.name=a,spec.paused!=true")
            events = kube.list(
                Event, "default", field_selector="involvedObject.name=b,involvedObject.kind=Cluster"
            )
            by_owner = kube.list(Cluster, field_selector="metadata.ownerReferences.uid=nobody")
    finally:
        running.stop()
        served.close()
    assert [c.name for c in by_name] == ["a"]
    assert [e.name for e in events] == ["e-b"]
    assert by_owner == []
    # Name and Event fields go to the server; fields only capa-py knows are filtered by the client. The three
    # lists must reach the server in this order with these selectors; a client another test left behind,
    # reconnecting to a reused port, may add lists of its own in between, so only their order is checked.
    recorded = iter(served.field_selectors)
    expected = ["metadata.name=a", "involvedObject.name=b,involvedObject.kind=Cluster", None]
    assert all(any(seen == wanted for seen in recorded) for wanted in expected), served.field_selectors
    assert not any(
        selector and ("ownerReferences" in selector or "spec.paused" in selector)
        for selector in served.field_selectors
    ), served.field_selectors


def test_managed_fields_an_object_carries_are_not_sent_to_the_server(
    kube: KubeStore, sqlite: SQLiteStore
) -> None:
    """An object read from another store (a move) carries that store's managedFields: sent, the server would
    take them as its own. Failed before the kube store left them out of what it writes."""
    carried = [{"manager": "elsewhere", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:a": {}}}}]  # fmt: skip
    obj = ConfigMap.model_validate(
        {"metadata": {"name": "moved", "namespace": "default", "managedFields": carried}, "data": {"a": "1"}}
    )
    created = kube.create(obj)
    assert created.metadata.managed_fields is None, "reads from a server keep none"
    managers = [e.manager for e in sqlite.get(ConfigMap, "moved", "default").metadata.managed_fields or []]
    assert managers == ["OpenAPI-Generator"], "the server recorded the writer, not what the object carried"
    created.data["b"] = "2"
    created.metadata.managed_fields = [e.model_copy() for e in obj.metadata.managed_fields or []]
    kube.update(created)
    managers = [e.manager for e in sqlite.get(ConfigMap, "moved", "default").metadata.managed_fields or []]
    assert managers == ["OpenAPI-Generator"]


# -- on the real kube-apiserver ------------------------------------------------------------------------


@pytest.fixture
def real_kube(real_api_server: PeerCluster) -> Iterator[KubeStore]:
    """The kube store on the session's kube-apiserver, emptied of capa-py's objects before and after."""
    purge(real_api_server)
    with KubeStore.from_kubeconfig(real_api_server.admin_kubeconfig) as store:
        yield store
    purge(real_api_server)


def test_on_a_real_api_server_deleting_a_custom_resource_returns_its_last_state(real_kube: KubeStore) -> None:
    """Failed before: a kube-apiserver answers a custom resource's immediate delete with a Status (capa serve
    with the object), and the store returned None."""
    created = real_kube.create(Cluster.model_validate({"metadata": {"name": "demo"}}))

    last = real_kube.delete(Cluster, "demo")

    assert last is not None
    assert last.metadata.uid == created.metadata.uid
    with pytest.raises(NotFound):
        real_kube.get(Cluster, "demo")


def real_built_in_objects() -> list[KubeObject]:
    """:func:`built_in_objects` where the real server has none of them yet: a Namespace and a CRD of their
    own (capa-py's CRDs and the test namespaces are installed there)."""
    objects = []
    for obj in built_in_objects():
        if isinstance(obj, Namespace):
            objects.append(Namespace.model_validate({"metadata": {"name": "capa-store-ns"}}))
        elif isinstance(obj, CustomResourceDefinition):
            doc = obj.to_dict()
            doc["spec"]["group"] = "store-check.capa-py.io"
            doc["metadata"]["name"] = f"{doc['spec']['names']['plural']}.store-check.capa-py.io"
            objects.append(CustomResourceDefinition.model_validate(doc))
        else:
            objects.append(obj)
    return objects


@pytest.mark.parametrize("obj", real_built_in_objects(), ids=lambda o: o.KIND)
def test_on_a_real_api_server_a_built_in_kind_is_created_read_listed_updated_and_deleted(
    real_kube: KubeStore, obj: KubeObject
) -> None:
    """Failed before for CustomResourceDefinition: the API server answers its create with ``"conditions":
    null``, which the model refused."""
    kind = type(obj)
    created = real_kube.create(obj)
    try:
        assert created.metadata.uid, f"{kind.KIND}: the server must assign a uid"
        assert real_kube.get(kind, obj.name, obj.namespace).metadata.uid == created.metadata.uid
        assert obj.name in [o.name for o in real_kube.list(kind, obj.namespace)]
        current = real_kube.get(kind, obj.name, obj.namespace)
        current.metadata.labels["touched"] = "yes"
        updated = real_kube.update(current)
        assert updated.metadata.labels["touched"] == "yes"
        assert updated.metadata.resource_version != current.metadata.resource_version
    finally:
        last = real_kube.delete(kind, obj.name, obj.namespace)
    assert last is not None
    assert last.metadata.uid == created.metadata.uid
