"""Fixtures of the tests judged by upstream Cluster API (core and clusterctl, ``tests.peers.clusterapi``):
a moto server as AWS for the scenarios that run capa-py's controller against it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture(scope="module")
def clusterctl_aws() -> Iterator[MotoServer]:
    """A moto server of the module's own, with moto's default AMIs (the machines launch one of them)."""
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()
