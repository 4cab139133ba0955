"""Fixtures for controller tests: the real controllers in-process, a real SQLite store, moto over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, ClientPool, RetryPolicy
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.run import ConvergeResult, converge
from tests.harness.moto_server import MotoServer, start_moto_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"
FAST_RETRY = RetryPolicy(attempts=6, initial_delay=0.01, max_delay=0.1, not_found_window=1.0)


def without_user_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials, profile, config file or instance metadata of the user's reach the clients."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def moto_with_amis() -> Iterator[MotoServer]:
    """moto over HTTP with its bundled AMIs (the example cluster launches one of them)."""
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()


class Harness:
    """A store, a client pool and the AWS controllers, wired as ``capa apply`` wires them."""

    def __init__(self, store: SQLiteStore, server: MotoServer, observe: bool = False) -> None:
        self.store = store
        self.server = server
        self.observe = observe
        """Whether the pool shares observations across calls, as the CLI's and the controller's do."""
        self.pool = self.new_pool()
        self.engine = Engine(MOTO)

    def new_pool(self) -> ClientPool:
        return ClientPool(
            AWSSettings(
                region="us-east-1", endpoint_url=self.server.url, retry=FAST_RETRY, observe=self.observe
            ),
            limiter=RateLimiter(enabled=False),
        )

    @property
    def aws(self) -> AWSClients:
        return self.pool.for_region("us-east-1")

    def controllers(self) -> list:  # type: ignore[type-arg]
        return aws_controllers(self.store, self.pool, self.engine)

    def apply(self, objects: list[KubeObject]) -> list[KubeObject]:
        return [a.object for a in apply_objects(self.store, objects)]

    def converge(
        self, targets: list[KubeObject], goal: str = "ready", timeout: float = 60.0
    ) -> ConvergeResult:
        return converge(self.store, self.controllers(), targets, goal=goal, timeout=timeout)  # type: ignore[arg-type]


@pytest.fixture
def harness(moto_with_amis: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    without_user_aws_settings(monkeypatch, tmp_path)
    moto_with_amis.reset()
    store = SQLiteStore(tmp_path / "state.db")
    yield Harness(store, moto_with_amis)
    store.close()


@pytest.fixture
def example() -> Callable[[], list[KubeObject]]:
    return lambda: load_manifests([EXAMPLE])
