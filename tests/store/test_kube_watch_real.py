"""The kube store's watch on the real kube-apiserver: it survives dropped connections and the server's
timeouts without losing or repeating an event, resumes from the bookmarks the server sends, and raises
Expired for a compacted resourceVersion.

The watch goes through a TCP proxy (TLS passes through it untouched) that cuts its connections; writes go
straight to the server as the admin. Where the watch resumed is read from the API server's audit log (the
``resourceVersion`` of each watch request).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from capa_py.api import Cluster
from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.manifests.crds import crd_for
from capa_py.store import Expired, StoreError
from capa_py.store.kube import KubeStore
from tests.peers.cluster import PeerCluster, running
from tests.peers.fixtures import require_go
from tests.store.kube_support import CuttingProxy, purge
from tests.store.test_kube_watch import SAFETY_TIMEOUT, Follower, new_cluster, wait_for
from tests.support.eventually import eventually


@pytest.fixture
def admin(real_api_server: PeerCluster) -> Iterator[KubeStore]:
    purge(real_api_server)
    with KubeStore.from_kubeconfig(real_api_server.admin_kubeconfig) as store:
        yield store
    purge(real_api_server)


def through(proxy: CuttingProxy, cluster: PeerCluster, path: Path) -> Path:
    """The admin kubeconfig, pointed at the proxy (its certificate names 127.0.0.1, as the proxy is)."""
    document = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = proxy.url.replace("http://", "https://")
    path.write_text(yaml.safe_dump(document))
    return path


def proxy_for(cluster: PeerCluster) -> CuttingProxy:
    address = urlsplit(cluster.url)
    return CuttingProxy((address.hostname or "127.0.0.1", address.port or 0))


def watched_from(cluster: PeerCluster, namespace: str) -> list[int]:
    """The resourceVersion of every watch of Clusters in ``namespace`` the API server started, in order."""
    versions = []
    for event in cluster.audit_events():
        uri = str(event.get("requestURI") or "")
        if event.get("stage") != "ResponseStarted" or f"/namespaces/{namespace}/clusters?" not in uri:
            continue
        query = parse_qs(urlsplit(uri).query)
        if query.get("watch") == ["true"]:
            versions.append(int(query["resourceVersion"][0]))
    return versions


def test_a_watch_cut_mid_stream_loses_and_repeats_no_event(
    real_api_server: PeerCluster, admin: KubeStore, tmp_path: Path
) -> None:
    proxy = proxy_for(real_api_server)
    watcher = KubeStore.from_kubeconfig(through(proxy, real_api_server, tmp_path / "proxied"))
    try:
        start = admin.list(Cluster, "team-a").resource_version
        follower = Follower(watcher.watch(Cluster, "team-a", resource_version=start))
        expected: list[tuple[str, str, str]] = []
        seen = []
        for batch in range(3):
            for index in range(4):
                created = admin.create(_in("team-a", new_cluster(f"c-{batch}-{index}")))
                expected.append(("ADDED", created.name, created.metadata.resource_version or ""))
            first = admin.get(Cluster, f"c-{batch}-0", "team-a")
            first.metadata.labels["batch"] = str(batch)
            modified = admin.update(first)
            expected.append(("MODIFIED", modified.name, modified.metadata.resource_version or ""))
            if batch == 0:
                seen.append(follower.next())  # the connection is up before it is cut
            wait_for(lambda: proxy.open_connections() >= 1, "the watch's reconnect")
            assert proxy.cut() >= 1, "there was no connection to cut"
        seen += [follower.next() for _ in range(len(expected) - len(seen))]
        assert [(e.type, e.object.name, e.resource_version) for e in seen] == expected, (
            "across three dropped connections the watch must deliver every event exactly once, in order"
        )
        admin.create(_in("team-a", new_cluster("after")))
        assert follower.next().object.name == "after", "nothing may be pending twice after the last cut"
    finally:
        watcher.close()
        proxy.close()


def _in(namespace: str, cluster: Cluster) -> Cluster:
    cluster.metadata.namespace = namespace
    return cluster


def test_a_watch_resumes_after_the_servers_timeout_from_the_bookmarks_it_sent(
    real_api_server: PeerCluster, admin: KubeStore
) -> None:
    """The API server ends each connection at its ``timeoutSeconds``, sending a BOOKMARK shortly before: at
    the newest resourceVersion of the kind, though nothing in the watched namespace changed. The next
    connection starts from there."""
    with KubeStore.from_kubeconfig(real_api_server.admin_kubeconfig) as watcher:
        watcher.watch_connection_seconds = 4
        start = admin.list(Cluster, "team-a").resource_version
        follower = Follower(watcher.watch(Cluster, "team-a", resource_version=start))
        admin.create(_in("team-a", new_cluster("first")))
        assert follower.next().object.name == "first"
        # Writes of the same kind elsewhere: the watched namespace stays quiet, bookmarks move the watch.
        elsewhere = [admin.create(_in("team-b", new_cluster(f"other-{i}"))) for i in range(3)]
        head = int(elsewhere[-1].metadata.resource_version or 0)
        wait_for(
            lambda: any(v >= head for v in watched_from(real_api_server, "team-a")),
            "a connection resumed from a bookmark at or after the other namespace's writes",
        )
        admin.create(_in("team-a", new_cluster("second")))
        event = follower.next()
        assert (event.type, event.object.name) == ("ADDED", "second")
        asked = watched_from(real_api_server, "team-a")
        assert all(b >= a for a, b in itertools.pairwise(asked)), f"a connection went backwards: {asked}"


def test_a_watch_from_a_compacted_version_raises_expired(tmp_path: Path) -> None:
    """Without the watch cache the API server reads etcd: once etcd is compacted, a watch from an older
    resourceVersion is gone (410), which the store raises as Expired."""
    require_go()
    with (
        running(
            directory=tmp_path / "cluster",
            controller_manager=False,
            extra_apiserver_args=("--watch-cache=false",),
        ) as cluster,
        KubeStore.from_kubeconfig(cluster.admin_kubeconfig) as store,
    ):
        store.create(CustomResourceDefinition.model_validate(crd_for(Cluster)))
        created = eventually(
            lambda: store.create(new_cluster("demo")),
            "the Cluster CRD served",
            timeout=SAFETY_TIMEOUT,
            interval=0.1,
            ignoring=(StoreError,),
        )
        created_at = created.metadata.resource_version
        for step in range(3):
            created.metadata.annotations["step"] = str(step)
            created = store.update(created)
        events = list(store.watch(Cluster, resource_version=created_at, timeout=0))
        assert [e.type for e in events] == ["MODIFIED"] * 3
        cluster.compact_etcd()

        with pytest.raises(Expired):
            next(store.watch(Cluster, resource_version=created_at, timeout=SAFETY_TIMEOUT))
        recent = created.metadata.resource_version
        created.metadata.annotations["step"] = "after"
        store.update(created)
        assert [e.type for e in store.watch(Cluster, resource_version=recent, timeout=0)] == ["MODIFIED"], (
            "a resourceVersion since the compaction must still be watchable"
        )
