"""Helpers of the kube store tests: a client for a served store, and a TCP proxy that can cut connections."""

from __future__ import annotations

from kubernetes import client


def api_client_for(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)
