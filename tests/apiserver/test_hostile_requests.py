"""Requests the API fuzzer (tests/fuzz/test_fuzz_api.py) found capa serve mishandling, each kept here as a
plain regression test that failed before its fix."""

from __future__ import annotations

import http.client
import urllib.parse

from tests.apiserver.apiserver_support import Server

BASE = "/api/v1/namespaces/default/configmaps"


def test_an_unknown_field_with_a_control_character_is_warned_about_escaped(server: Server) -> None:
    """The Warning header naming the unknown field could not be written: the connection was dropped with no
    answer at all."""
    server.http("POST", BASE, {"metadata": {"name": "one"}})
    parsed = urllib.parse.urlsplit(server.url)
    assert parsed.hostname is not None
    connection = http.client.HTTPSConnection(parsed.hostname, parsed.port, timeout=30, context=server.context)
    try:
        body = b'{"\\u001f": false, "data": {"a": "b"}}'
        connection.request("PATCH", f"{BASE}/one", body, {"Content-Type": "application/merge-patch+json"})
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    assert response.status == 200
    assert response.getheader("Warning") == '299 - "unknown field \\"\\u001f\\""'


def test_a_path_with_a_newline_is_answered_with_a_status(server: Server) -> None:
    """The server's one route did not match an escaped newline in a path: aiohttp answered a plain-text
    ``404: Not Found`` instead of a Status."""
    code, status = server.http("GET", "/api/v1/%0A")
    assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")
