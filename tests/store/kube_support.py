"""Helpers of the kube store tests: a client for a served store, and a TCP proxy that cuts connections."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass, field

from kubernetes import client

_REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1\r\n")
_BOOKMARK = re.compile(rb'"type":"BOOKMARK".*?"resourceVersion":"(\d+)"')


def api_client_for(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


@dataclass
class _Pair:
    downstream: socket.socket
    upstream: socket.socket


@dataclass
class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` (host, port). :meth:`cut` drops every open
    connection at once, in both directions, while new connections keep working. It records the path of
    every request it relays (``requests``) and the resourceVersion of every BOOKMARK the server sent back
    (``bookmarks``), so tests can see what a client asked for and what it was told."""

    upstream: tuple[str, int]
    requests: list[str] = field(default_factory=list)
    bookmarks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:  # the server is gone (a test tearing down): refuse as it would
                downstream.close()
                continue
            with self._lock:
                self._pairs.append(_Pair(downstream, upstream))
            threading.Thread(target=self._relay, args=(downstream, upstream, True), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, downstream, False), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
                # Recorded once relayed: a bookmark seen here is on its way to the client.
                with self._lock:
                    if requests:
                        self.requests.extend(m.group(2).decode() for m in _REQUEST_LINE.finditer(data))
                    else:
                        self.bookmarks.extend(int(m.group(1)) for m in _BOOKMARK.finditer(data))
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def watch_requests(self) -> list[str]:
        with self._lock:
            return [path for path in self.requests if "watch=" in path]

    def cut(self) -> int:
        """Drop every open connection; how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in (pair.downstream, pair.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        return len(pairs)

    def close(self) -> None:
        self._listener.close()
        self.cut()
