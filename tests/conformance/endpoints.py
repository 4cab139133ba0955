"""The two servers the differential suite compares, behind one small HTTP client.

``Endpoint.call`` sends one request and returns what a client sees: the status code, the headers and the
decoded body (JSON, or the raw text when it is not JSON, or the list of events of a watch). Requests to the
real API server authenticate with the admin client certificate; ``capa serve`` takes them as they are.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def reason(self) -> str | None:
        """A Status body's reason (None for any other body)."""
        if isinstance(self.body, dict) and self.body.get("kind") == "Status":
            return self.body.get("reason")
        return None


@dataclass
class Endpoint:
    """One server: ``name`` is ``capa serve`` or ``kube-apiserver``."""

    name: str
    url: str
    context: ssl.SSLContext | None = None
    kubeconfig: str | None = None
    calls: int = field(default=0)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        accept: str = "application/json",
        timeout: float = 30.0,
    ) -> Reply:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", content_type)
        self.calls += 1
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=timeout) as response:
                return self._reply(response.status, dict(response.headers), response.read(), query)
        except urllib.error.HTTPError as exc:
            with exc:
                return self._reply(exc.code, dict(exc.headers), exc.read(), query)

    @staticmethod
    def _reply(status: int, headers: dict[str, str], raw: bytes, query: dict[str, str] | None) -> Reply:
        if query and query.get("watch") in ("1", "true") and status == 200:
            events = [json.loads(line) for line in raw.splitlines() if line.strip()]
            return Reply(status, headers, events)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        return Reply(status, headers, body)

    def api_client(self) -> client.ApiClient:
        """The official client, configured for this server."""
        if self.kubeconfig is not None:
            from kubernetes import config

            return config.new_client_from_config(config_file=self.kubeconfig)
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)
