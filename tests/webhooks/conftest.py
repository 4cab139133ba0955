"""Fixtures for the webhook tests: the in-process ``cli`` runner, a loopback endpoint nothing answers (for
controllers that must never reach AWS), a serving certificate and the webhook server using it."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.webhooks import RunningWebhook, start_in_thread
from tests.cli.conftest import cli, closed_endpoint, state
from tests.webhooks.certificates import write_certificate

__all__ = ["cert_dir", "cli", "closed_endpoint", "state", "webhook"]


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    """A directory holding a fresh self-signed ``tls.crt``/``tls.key`` for 127.0.0.1."""
    directory = tmp_path / "certs"
    write_certificate(directory)
    return directory


@pytest.fixture
def webhook(cert_dir: Path) -> Iterator[RunningWebhook]:
    """The webhook server on a free loopback port, with ``cert_dir``'s certificate."""
    running = start_in_thread(cert_dir, port=0, reload_interval=0.1)
    yield running
    running.stop()
