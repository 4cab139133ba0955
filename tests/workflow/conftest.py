"""Fixtures for the workflow tests: the controller tests' moto server and harness, for the rollout's AWS
tests (the other workflow tests need no AWS and never start them)."""

from __future__ import annotations

from tests.controllers.conftest import example, harness, moto_with_amis  # noqa: F401 (shared fixtures)
