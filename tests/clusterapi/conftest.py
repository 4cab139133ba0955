"""Fixtures of the tests under upstream Cluster API core: the moto server the real-API-server tests use.

Cluster API core itself is the session's ``capi_cluster`` (``tests/peers/fixtures.py``): a control plane of
its own with Cluster API's CRDs, webhooks and manager, built from the pinned Go module.
"""

from __future__ import annotations

from tests.realkube.conftest import aws, inspector, realkube_moto

__all__ = ["aws", "inspector", "realkube_moto"]
