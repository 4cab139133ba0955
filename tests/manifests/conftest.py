"""Fixtures for the manifests tests: the controller harness (real controllers, SQLite store, moto over HTTP)
for the RBAC derivation, and the in-process ``cli`` runner."""

from tests.cli.conftest import cli, state
from tests.controllers.conftest import example, harness, moto_with_amis

__all__ = ["cli", "example", "harness", "moto_with_amis", "state"]
