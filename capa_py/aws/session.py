"""Sessions and clients: region, profile, credential chain, endpoint override, retries, accounting.

:class:`AWSClients` makes one boto3 client per service with

* botocore's own retries off (``total_max_attempts=1``), so they never multiply with ours;
* our retries in :meth:`AWSClient.call` (tenacity: exponential backoff with jitter) for throttling and
  transient errors only;
* the rate limiter and the call accounting hooked on botocore's ``before-call``/``after-call`` events,
  so every HTTP call — paginated ones included — is limited and counted;
* any extra client hooks registered with :func:`register_client_hook` (fault injection, tracing).

The endpoint comes from ``--aws-endpoint`` (``local`` is resolved by :mod:`capa_py.aws.local` before it
reaches here) or ``AWS_ENDPOINT_URL``, as boto3 itself honours it. Against an explicit endpoint and with no
credentials configured, emulator credentials are used; against AWS with none, :class:`MissingCredentials`
says what to do.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from capa_py import __version__
from capa_py.aws import deadline
from capa_py.aws.accounting import record_call
from capa_py.aws.calllog import note_call
from capa_py.aws.errors import AWSError, MissingCredentials, NotFound, Throttled, Transient, classify
from capa_py.aws.models import forget_repeated_paths, session_with_shared_data
from capa_py.aws.observations import Observations
from capa_py.aws.ratelimit import RateLimiter
from capa_py.logging import get_logger

_log = get_logger("aws")

ClientHook = Callable[[BaseClient, str], None]
_client_hooks: list[ClientHook] = []

EMULATOR_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


CallObserver = Callable[[str, str, str, int], None]
"""``observer(service, region, operation, retries)`` after every :meth:`AWSClient.call`, retried or not."""
_call_observers: list[CallObserver] = []


def register_call_observer(observer: CallObserver) -> Callable[[], None]:
    """Tell ``observer`` how many retries each call took (metrics); returns an unregister function."""
    _call_observers.append(observer)
    return lambda: _call_observers.remove(observer) if observer in _call_observers else None


def register_client_hook(hook: ClientHook) -> Callable[[], None]:
    """Call ``hook(client, service)`` on every client made from now on; returns an unregister function."""
    _client_hooks.append(hook)
    return lambda: _client_hooks.remove(hook) if hook in _client_hooks else None


@dataclass(frozen=True)
class RetryPolicy:
    """Our retries for throttling and transient errors (botocore's are off)."""

    attempts: int = 8
    initial_delay: float = 0.25
    max_delay: float = 20.0
    not_found_window: float = 10.0
    """How long a call marked as following a create retries NotFound (eventual consistency)."""


@dataclass(frozen=True)
class AWSSettings:
    region: str = "us-east-1"
    profile: str | None = None
    endpoint_url: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    observe: bool = False
    """Share freshness-bounded observations between reconciles (:mod:`capa_py.aws.observations`): what
    the CLI and the controller do. Off, every lookup asks AWS (the library default)."""

    @property
    def effective_endpoint(self) -> str | None:
        return self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None


def _outcome(parsed: dict[str, Any], status: int) -> str:
    code = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
    if code:
        return str(code)
    return "ok" if status < 300 else f"HTTP{status}"


class AWSClient:
    """One service's client: ``call("CreateVpc", CidrBlock=...)`` with classified errors and retries."""

    def __init__(self, service: str, raw: BaseClient, retry: RetryPolicy) -> None:
        self.service = service
        self.raw = raw
        self.retry = retry

    def _invoke(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        method = getattr(self.raw, _snake(operation))
        try:
            return method(**params)  # type: ignore[no-any-return]
        except (ClientError, BotoCoreError) as exc:
            raise classify(exc, self.service, operation) from exc

    def call(self, operation: str, *, after_create: bool = False, **params: Any) -> dict[str, Any]:
        """Call an API operation by its AWS name, retrying throttling and transient errors.

        ``after_create=True`` marks a call about a resource that was just created: a NotFound is then
        eventual consistency and is retried for ``retry.not_found_window`` seconds.
        """
        return self.call_with(operation, params, after_create=after_create)

    def call_with(
        self,
        operation: str,
        params: dict[str, Any],
        *,
        after_create: bool = False,
        repeat_safe: bool | None = None,
    ) -> dict[str, Any]:
        """:meth:`call` with the parameters as a dict, and ``repeat_safe`` overriding
        :func:`is_safe_to_repeat` where the caller knows better: a required token member sent with a value
        no one will send again (so a repeat would create twice), or a change that is idempotent."""
        # A throttled request was refused, so retrying it is always safe. A 5xx or a lost connection may
        # hide a create that happened: retried only where a repeat cannot duplicate (reads, deletes,
        # updates, and creates carrying a client token); otherwise the error goes up and the next
        # reconcile finds the resource by its tags or key.
        retryable: tuple[type[AWSError], ...] = (Throttled,)
        if is_safe_to_repeat(operation, params) if repeat_safe is None else repeat_safe:
            retryable = (Throttled, Transient)
        stop: Any = stop_after_attempt(self.retry.attempts)
        if after_create:
            retryable = (*retryable, NotFound)
            stop = stop | stop_after_delay(self.retry.not_found_window)
        attempts = 0
        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(retryable),
                wait=wait_random_exponential(multiplier=self.retry.initial_delay, max=self.retry.max_delay),
                stop=stop,
                reraise=True,
            ):
                attempts = attempt.retry_state.attempt_number
                with attempt:
                    return self._invoke(operation, params)
        finally:
            for observer in list(_call_observers):
                observer(self.service, str(self.raw.meta.region_name or ""), operation, max(0, attempts - 1))
        raise AssertionError("unreachable")

    def pages(self, operation: str, result_key: str, **params: Any) -> Iterator[Any]:
        """Every item of a paginated listing (``NextToken``, ``Marker``/``NextMarker`` or
        ``PaginationToken``), each page call retried on its own."""
        token_in, token_out = _pagination_tokens(self.raw, operation)
        while True:
            page = self.call(operation, **params)
            yield from page.get(result_key, [])
            token = page.get(token_out)
            if not token or token_in is None:
                return
            params = {**params, token_in: token}


_IDEMPOTENT_CREATES = frozenset({"CreateTags"})  # sets tags: repeating it changes nothing
_CREATING_PREFIXES = ("Create", "Allocate", "Run", "Request", "Import", "Copy", "Purchase")
# Links that AWS refuses to make twice: repeating one whose first attempt succeeded unseen fails with
# Resource.AlreadyAssociated / InvalidPermission.Duplicate, turning a success into an error.
_LINKING_PREFIXES = ("Attach", "Associate", "Authorize")


def is_safe_to_repeat(operation: str, params: dict[str, Any]) -> bool:
    """Whether repeating a call whose outcome is unknown can neither create a second resource nor fail
    because the first attempt succeeded."""
    if operation in _IDEMPOTENT_CREATES or not operation.startswith(_CREATING_PREFIXES + _LINKING_PREFIXES):
        return True
    return any(key in params for key in ("ClientToken", "ClientRequestToken", "CallerReference"))


def _snake(operation: str) -> str:
    from botocore import xform_name

    return xform_name(operation)


def _pagination_tokens(raw: BaseClient, operation: str) -> tuple[str | None, str]:
    shape = raw.meta.service_model.operation_model(operation).input_shape
    members = shape.members if shape is not None else {}
    for token_in, token_out in (
        ("NextToken", "NextToken"),
        ("Marker", "NextMarker"),
        ("PaginationToken", "PaginationToken"),
    ):
        if token_in in members:
            return token_in, token_out
    return None, "NextToken"


class AWSClients:
    """Clients for one region (and profile and endpoint), made once and shared by threads.

    ``credentials`` (an identity's: :mod:`capa_py.aws.credentials`) replace the credential chain and the
    profile: the clients sign with them and nothing else."""

    def __init__(
        self,
        settings: AWSSettings,
        limiter: RateLimiter | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter or RateLimiter()
        endpoint = settings.effective_endpoint
        self._credentials: dict[str, str] = {}
        # Every session reads botocore's models through the process's one loader (:mod:`capa_py.aws.models`).
        if credentials is not None:
            from capa_py.aws.credentials import botocore_session

            core = session_with_shared_data(botocore_session(credentials))
        else:
            core = session_with_shared_data(profile=settings.profile)
        self.session = boto3.session.Session(botocore_session=core, region_name=settings.region)
        forget_repeated_paths()
        if self.session.get_credentials() is None:
            if endpoint is None:
                raise MissingCredentials(
                    "no AWS credentials found and no endpoint given: configure credentials (a profile, "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, SSO or an instance role), or pass "
                    "--aws-endpoint local to run against the embedded AWS endpoint"
                )
            self._credentials = dict(EMULATOR_CREDENTIALS)
        self._clients: dict[str, AWSClient] = {}
        self._lock = threading.Lock()
        self.observations = Observations(enabled=settings.observe)
        """What this process knows of the region's resources (shared by every controller using it)."""

    @property
    def region(self) -> str:
        return self.settings.region

    @property
    def endpoint(self) -> str | None:
        return self.settings.effective_endpoint

    def client(self, service: str) -> AWSClient:
        with self._lock:
            if service not in self._clients:
                self._clients[service] = AWSClient(service, self._make(service), self.settings.retry)
            return self._clients[service]

    @property
    def ec2(self) -> AWSClient:
        return self.client("ec2")

    @property
    def elbv2(self) -> AWSClient:
        return self.client("elbv2")

    @property
    def autoscaling(self) -> AWSClient:
        return self.client("autoscaling")

    @property
    def tagging(self) -> AWSClient:
        return self.client("resourcegroupstaggingapi")

    def _make(self, service: str) -> BaseClient:
        config = Config(
            region_name=self.settings.region,
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=self.settings.connect_timeout,
            read_timeout=self.settings.read_timeout,
            max_pool_connections=32,
            user_agent_extra=f"capa-py/{__version__}",
        )
        raw = self.session.client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.settings.effective_endpoint,
            config=config,
            **self._credentials,
        )
        self._instrument(raw, service)
        for hook in list(_client_hooks):
            hook(raw, service)
        return raw  # type: ignore[no-any-return]

    def _instrument(self, raw: BaseClient, service: str) -> None:
        limiter = self.limiter

        def before_call(model: Any, **_: Any) -> None:
            # No call starts after the command's deadline (a wait for the rate limiter included).
            deadline.check(service, model.name)
            limiter.acquire(service, model.name)
            deadline.check(service, model.name)
            note_call(service, model.name)

        def before_send(event_name: str, **_: Any) -> None:
            # Checked again as the request leaves: signing it (after ``before-call``) takes a moment.
            deadline.check(service, operation_of_event(event_name))

        def after_call(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
            outcome = _outcome(parsed, http_response.status_code)
            record_call(service, model.name, outcome)
            if classify_is_throttle(outcome):
                limiter.throttled(service, model.name)

        def after_call_error(exception: Exception, event_name: str, **_: Any) -> None:
            # No response (a refused connection, a timeout): the event name is the only place botocore
            # names the operation ("after-call-error.<service-id>.<Operation>"). A request the deadline
            # stopped as it was about to leave was never sent.
            if isinstance(exception, deadline.DeadlinePassed):
                return
            record_call(service, operation_of_event(event_name), type(exception).__name__)

        raw.meta.events.register("before-call", before_call)
        raw.meta.events.register("before-send", before_send)
        raw.meta.events.register("after-call", after_call)
        raw.meta.events.register("after-call-error", after_call_error)


def operation_of_event(event_name: str) -> str:
    """The operation a botocore client event is about: ``after-call-error.ec2.CreateVpc`` → ``CreateVpc``."""
    return event_name.rsplit(".", 1)[-1] if event_name.count(".") >= 2 else "Unknown"


def classify_is_throttle(outcome: str) -> bool:
    from capa_py.aws.errors import THROTTLING_CODES

    return outcome in THROTTLING_CODES


class ClientPool:
    """AWSClients per region for one profile and endpoint (an AWSCluster names its region), signing with
    ``credentials`` when given (one pool per identity: :mod:`controllers.identity`)."""

    def __init__(
        self,
        settings: AWSSettings,
        limiter: RateLimiter | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter or RateLimiter()
        self.credentials = credentials
        self._by_region: dict[str, AWSClients] = {}
        self._lock = threading.Lock()

    def for_region(self, region: str | None = None) -> AWSClients:
        region = region or self.settings.region
        with self._lock:
            if region not in self._by_region:
                settings = dataclasses.replace(self.settings, region=region)
                self._by_region[region] = AWSClients(settings, self.limiter, self.credentials)
            return self._by_region[region]
