"""A watch that asks for bookmarks gets the first one as soon as it has caught up with the store, not one
bookmark interval later: a client reading up to the current version (the kube store's ``timeout=0`` watch,
the controller manager's poll) returns at once."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from capa_py.api import Cluster, Secret
from capa_py.apiserver import start_in_thread
from capa_py.store import SQLiteStore

SAFETY_TIMEOUT = 30.0


def test_the_first_bookmark_comes_once_the_watch_has_caught_up(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "state.db", poll_interval=0.02) as store:
        created = store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
        store.create(Secret.model_validate({"metadata": {"name": "later"}}))
        head = store.current_resource_version()
        server = start_in_thread(store, bookmark_interval=3600)  # the periodic bookmark never comes
        try:
            path = "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/clusters?watch=1&resourceVersion=0"
            url = f"{server.url}{path}&allowWatchBookmarks=true&timeoutSeconds=3600"
            with urllib.request.urlopen(
                url, context=server.client_context(), timeout=SAFETY_TIMEOUT
            ) as response:
                first, second = json.loads(response.readline()), json.loads(response.readline())
        finally:
            server.stop()

    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "demo")
    assert first["object"]["metadata"]["resourceVersion"] == created.metadata.resource_version
    assert second["type"] == "BOOKMARK", f"expected the catch-up bookmark, got {second}"
    assert int(second["object"]["metadata"]["resourceVersion"]) >= int(head), "it must carry the head"
