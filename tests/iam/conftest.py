"""Fixtures for the IAM tests: moto over HTTP (IAM and STS), reset for every test."""

from __future__ import annotations

from tests.harness.fixtures import _plain_clients, aws, moto_server  # noqa: F401 - fixtures this package uses
