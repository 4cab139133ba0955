"""Fixtures for the webhook tests: the in-process ``cli`` runner and a loopback endpoint nothing answers
(for controllers that must never reach AWS)."""

from tests.cli.conftest import cli, closed_endpoint, state

__all__ = ["cli", "closed_endpoint", "state"]
