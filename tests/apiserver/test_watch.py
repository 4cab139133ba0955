"""Watches over HTTP: another client's change, bookmarks, resuming, timeouts and 410 Gone."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.apiserver.apiserver_support import GROUP, VERSION, Server, ServerFactory, aws_cluster

PLURAL = "awsclusters"
PATH = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


def raw_events(server: Server, query: str) -> list[dict[str, Any]]:
    """Every event of a watch that ends by its own timeoutSeconds."""
    with urllib.request.urlopen(
        f"{server.url}{PATH}?watch=1&{query}", context=server.context, timeout=60
    ) as response:
        return [json.loads(line) for line in response if line.strip()]


def test_a_watch_sees_a_change_made_by_another_client(
    server: Server, custom: client.CustomObjectsApi
) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster())
    seen: list[tuple[str, str]] = []
    started = threading.Event()

    def follow() -> None:
        with server.api_client() as other:
            stream = watch.Watch()
            started.set()
            for event in stream.stream(
                client.CustomObjectsApi(other).list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                resource_version=created["metadata"]["resourceVersion"],
                timeout_seconds=30,
            ):
                labels = event["object"]["metadata"].get("labels", {})
                seen.append((event["type"], labels.get("changed", "")))
                if labels.get("changed"):
                    stream.stop()

    follower = threading.Thread(target=follow)
    follower.start()
    started.wait()
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", {"metadata": {"labels": {"changed": "yes"}}}
    )
    follower.join(60)
    assert not follower.is_alive()
    assert seen == [("MODIFIED", "yes")]


def test_a_watch_without_resource_version_starts_with_the_current_objects(
    server: Server, custom: client.CustomObjectsApi
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster("a"))
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster("b", {"x": "y"}))
    events = raw_events(server, "timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]
    selected = raw_events(server, "timeoutSeconds=1&labelSelector=x%3Dy")
    assert [e["object"]["metadata"]["name"] for e in selected] == ["b"]
    by_field = raw_events(server, "timeoutSeconds=1&fieldSelector=metadata.name%3Da")
    assert [e["object"]["metadata"]["name"] for e in by_field] == ["a"]


def test_bookmarks_carry_a_resource_version_to_resume_from(
    server: Server, custom: client.CustomObjectsApi
) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster())
    # A write to another kind moves the store's head: an idle watch's bookmark follows it.
    core = client.CoreV1Api(server.api_client())
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    head = server.store.current_resource_version()
    events = raw_events(
        server,
        f"resourceVersion={created['metadata']['resourceVersion']}&allowWatchBookmarks=true&timeoutSeconds=2",
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert all(e["object"]["kind"] == "AWSCluster" for e in bookmarks)
    assert all(e["type"] == "BOOKMARK" for e in events)
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= int(head)

    # Resuming from the bookmark sees exactly the changes made after it.
    resume = bookmarks[-1]["object"]["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", {"metadata": {"labels": {"n": "1"}}}
    )
    after = raw_events(server, f"resourceVersion={resume}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in after] == [("MODIFIED", {"n": "1"})]

    without = raw_events(server, f"resourceVersion={resume}&timeoutSeconds=1")
    assert "BOOKMARK" not in [e["type"] for e in without]


def test_a_too_old_resource_version_is_410_gone(make_server: ServerFactory) -> None:
    server = make_server(retain_events=5)
    with server.api_client() as api:
        custom = client.CustomObjectsApi(api)
        first = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster())
        for index in range(12):
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, "demo", {"metadata": {"labels": {"n": str(index)}}}
            )
        events = raw_events(
            server, f"resourceVersion={first['metadata']['resourceVersion']}&timeoutSeconds=5"
        )
        assert len(events) == 1
        assert events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")

        with pytest.raises(ApiException) as gone:
            for _ in watch.Watch().stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                resource_version=first["metadata"]["resourceVersion"],
                timeout_seconds=5,
            ):
                pass
        assert gone.value.status == 410


def test_a_watch_beyond_the_limit_is_429_and_a_slot_frees_when_a_watch_ends(
    make_server: ServerFactory,
) -> None:
    server = make_server(max_watches=1)
    opened = threading.Event()
    lines: list[bytes] = []

    def hold() -> None:
        with urllib.request.urlopen(
            f"{server.url}{PATH}?watch=1&timeoutSeconds=3", context=server.context, timeout=60
        ) as response:
            opened.set()
            lines.extend(response)

    holder = threading.Thread(target=hold)
    holder.start()
    opened.wait(30)
    code, status = server.http("GET", PATH + "?watch=1&timeoutSeconds=1")
    assert code == 429
    assert status["reason"] == "TooManyRequests"
    holder.join(60)
    assert raw_events(server, "timeoutSeconds=1") == []


def test_health_endpoints(server: Server) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        with urllib.request.urlopen(server.url + path, context=server.context, timeout=30) as response:
            assert response.read() == b"ok"


def test_a_field_selector_watch_reports_objects_entering_and_leaving_it(
    server: Server, custom: client.CustomObjectsApi
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, aws_cluster())
    ready = "fieldSelector=status.ready%3Dtrue"
    start = raw_events(server, f"timeoutSeconds=1&{ready}")
    assert start == []
    rv = server.store.current_resource_version()
    for value in (True, False):
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", PLURAL, "demo", {"status": {"ready": value}}
        )
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", {"metadata": {"labels": {"a": "b"}}}
    )
    # Watched from before the changes: entering, leaving, then nothing while outside.
    events = raw_events(server, f"resourceVersion={rv}&timeoutSeconds=1&{ready}")
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


def test_stopping_the_server_ends_open_watches(make_server: ServerFactory) -> None:
    server = make_server()
    opened = threading.Event()
    ended = threading.Event()

    def follow() -> None:
        with urllib.request.urlopen(
            f"{server.url}{PATH}?watch=1", context=server.context, timeout=60
        ) as response:
            opened.set()
            for _ in response:
                pass
        ended.set()

    follower = threading.Thread(target=follow)
    follower.start()
    opened.wait(30)
    server.running.stop()
    follower.join(60)
    assert ended.is_set()
