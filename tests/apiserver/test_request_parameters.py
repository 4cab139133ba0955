"""The query parameters of a get, list or watch, refused as the API server refuses them: a number that
does not parse is 400 BadRequest, a combination it does not take 422 Invalid naming ``ListOptions`` and the
field, a malformed resourceVersion 400 (a watch with one was answered 200 and ended silently, a get ignored
it), and a resourceVersion the store has not reached 504 Timeout ``ResourceVersionTooLarge`` after a moment (a
get and a list were answered with the current state, a watch with bookmarks at the future version). Each test
here failed before capa serve read the parameters this way; tests/conformance compares the same requests with
kube-apiserver."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest

from capa_py.apiserver import listoptions
from tests.apiserver.apiserver_support import Server

BASE = "/api/v1/namespaces/default/configmaps"


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


@pytest.fixture(autouse=True)
def short_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait for a resourceVersion the store has not reached, shortened for the tests."""
    monkeypatch.setattr(listoptions, "TOO_LARGE_WAIT", 0.3)


@pytest.mark.parametrize(
    "query",
    [
        "watch=1&resourceVersion=abc&timeoutSeconds=1",
        "resourceVersion=abc",
        "resourceVersion=-1",
        "resourceVersion=99999999999999999999999",
    ],
)
def test_a_malformed_resource_version_is_a_bad_request_naming_it(server: Server, query: str) -> None:
    server.http("POST", BASE, configmap("one"))
    for path in (f"{BASE}?{query}", f"{BASE}/one?{query}"):
        code, status = server.http("GET", path)
        assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest"), path
        assert status["message"].startswith("invalid resource version: resourceVersion: Invalid value:")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("watch=1&timeoutSeconds=soon", 'strconv.ParseInt: parsing "soon": invalid syntax'),
        ("watch=1&timeoutSeconds=1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        ("limit=ten", 'strconv.ParseInt: parsing "ten": invalid syntax'),
        (
            "limit=99999999999999999999",
            'strconv.ParseInt: parsing "99999999999999999999": value out of range',
        ),
    ],
)
def test_a_number_that_does_not_parse_is_a_bad_request(server: Server, query: str, message: str) -> None:
    code, status = server.http("GET", f"{BASE}?{query}")
    assert (code, status["reason"], status["message"]) == (400, "BadRequest", message)


@pytest.mark.parametrize(
    ("query", "causes"),
    [
        ("resourceVersionMatch=NotOlderThan", [("FieldValueForbidden", "resourceVersionMatch")]),
        (
            "resourceVersionMatch=Newest&resourceVersion=1",
            [("FieldValueNotSupported", "resourceVersionMatch")],
        ),
        ("resourceVersionMatch=Exact&resourceVersion=0", [("FieldValueForbidden", "resourceVersionMatch")]),
        ("sendInitialEvents=true", [("FieldValueForbidden", "sendInitialEvents")]),
        ("watch=1&sendInitialEvents=true", [("FieldValueForbidden", "resourceVersionMatch")]),
        (
            "watch=1&resourceVersionMatch=Exact&resourceVersion=1",
            [
                ("FieldValueForbidden", "resourceVersionMatch"),
                ("FieldValueNotSupported", "resourceVersionMatch"),
            ],
        ),
    ],
)
def test_options_that_do_not_go_together_are_invalid_list_options(
    server: Server, query: str, causes: list[tuple[str, str]]
) -> None:
    code, status = server.http("GET", f"{BASE}?{query}")
    assert (code, status["reason"], status["details"]["kind"], status["details"]["group"]) == (
        422,
        "Invalid",
        "ListOptions",
        "meta.k8s.io",
    )
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == causes
    assert status["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')


def test_a_boolean_parameter_is_true_unless_false_or_zero(server: Server) -> None:
    server.http("POST", BASE, configmap("one"))
    code, listed = server.http("GET", f"{BASE}?watch=false")
    assert (code, listed["kind"]) == (200, "ConfigMapList")
    with urllib.request.urlopen(
        f"{server.url}{BASE}?watch=no&timeoutSeconds=1", timeout=30, context=server.context
    ) as response:
        events = [json.loads(line) for line in response if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "one")]


def test_send_initial_events_ends_them_with_an_annotated_bookmark(server: Server) -> None:
    server.http("POST", BASE, configmap("one"))
    query = (
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    with urllib.request.urlopen(
        f"{server.url}{BASE}?watch=1&{query}", timeout=30, context=server.context
    ) as response:
        events = [json.loads(line) for line in response if line.strip()]
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_resource_version_from_the_future_times_out_on_a_get_and_a_list(server: Server) -> None:
    server.http("POST", BASE, configmap("one"))
    current = server.store.current_resource_version()
    for path in (f"{BASE}?resourceVersion=999999", f"{BASE}/one?resourceVersion=999999"):
        code, status = server.http("GET", path)
        assert (code, status["reason"]) == (504, "Timeout"), path
        assert status["message"] == f"Timeout: Too large resource version: 999999, current: {current}"
        assert status["details"] == {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }


def test_a_list_at_the_next_resource_version_is_answered_once_the_store_gets_there(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listoptions, "TOO_LARGE_WAIT", 30.0)
    server.http("POST", BASE, configmap("one"))
    wanted = int(server.store.current_resource_version()) + 1
    answered: list[tuple[int, Any]] = []
    reader = threading.Thread(
        target=lambda: answered.append(server.http("GET", f"{BASE}?resourceVersion={wanted}"))
    )
    reader.start()
    server.http("POST", BASE, configmap("two"))
    reader.join(60)
    code, listed = answered[0]
    assert code == 200
    assert sorted(item["metadata"]["name"] for item in listed["items"]) == ["one", "two"]


def test_a_watch_from_the_future_sends_nothing(server: Server) -> None:
    server.http("POST", BASE, configmap("one"))
    query = "watch=1&resourceVersion=999999&allowWatchBookmarks=true&timeoutSeconds=1"
    with urllib.request.urlopen(
        f"{server.url}{BASE}?{query}", timeout=30, context=server.context
    ) as response:
        assert response.status == 200
        assert response.read() == b""
