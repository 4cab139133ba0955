"""Large request bodies read at once are bounded: beyond ``MAX_LARGE_BODIES`` in flight, a request with a
large body is answered 429 TooManyRequests with ``Retry-After: 1`` before its body is read, as the API
server answers requests over its in-flight limit; small requests pass. Before, every large body was read at
once (benchmarks/large_bodies.py shows the memory that cost)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse

import pytest

from capa_py.apiserver import inflight
from tests.apiserver.apiserver_support import ServerFactory

PATH = "/api/v1/namespaces/default/configmaps"


def large_body() -> bytes:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "large-"}}
    doc["data"] = {"blob": "x" * (inflight.LARGE_BODY + 1024)}
    return json.dumps(doc).encode()


def post(
    host: str, port: int, context: ssl.SSLContext, body: bytes
) -> tuple[int, str | None, dict[str, object]]:
    connection = http.client.HTTPSConnection(host, port, timeout=30, context=context)
    try:
        connection.request("POST", PATH, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("Retry-After"), json.loads(response.read())
    finally:
        connection.close()


def test_a_large_body_beyond_those_in_flight_is_too_many_requests(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflight, "MAX_LARGE_BODIES", 1)
    server = make_server()
    parsed = urllib.parse.urlsplit(server.url)
    host, port = parsed.hostname, parsed.port
    assert host is not None
    assert port is not None
    body = large_body()
    with (
        socket.create_connection((host, port), timeout=30) as raw,
        server.context.wrap_socket(raw, server_hostname=host) as held,
    ):
        # One large body in flight: its headers and the first bytes sent, the rest held back.
        head = f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        held.sendall(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body[:100])
        for _ in range(200):  # until the server is reading the held body (each try is a real request)
            code, retry_after, status = post(host, port, server.context, body)
            if code == 429:
                break
            time.sleep(0.05)
        assert (code, retry_after) == (429, "1")
        assert status["reason"] == "TooManyRequests"
        assert status["details"] == {"retryAfterSeconds": 1}
        assert server.http("GET", PATH)[0] == 200  # a small request passes
        held.sendall(body[100:])
        answer = b""
        while chunk := held.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 201")
    assert post(host, port, server.context, body)[0] == 201  # the slot is free again
