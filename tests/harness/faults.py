"""Fault injection inside a capa process, through botocore event hooks on every client capa makes.

Configured by environment variables, read by :func:`install_from_env` (which ``crashing_capa.py`` calls
before it runs the real ``capa`` command):

``CAPA_TEST_CRASH_AFTER_MUTATING=N``
    SIGKILL the process right after the N-th *successful* mutating call (any operation not starting with
    Describe/List/Get…, answered without an error) has returned — after AWS acted, before capa could
    record anything about it.
``CAPA_TEST_THROTTLE_RATE=0.4``
    Answer that share of all calls, before they are sent, the way a throttled API does: EC2 with
    ``RequestLimitExceeded`` and HTTP 503, the JSON services (Secrets Manager) with
    ``ThrottlingException`` and the query services with ``Throttling``, both HTTP 400, each in its
    service's wire format. Nothing reaches the server for a throttled call. ``CAPA_TEST_SEED`` makes the
    sequence repeatable.
``CAPA_TEST_FAIL_OP=RunInstances:InvalidAMIID.NotFound[:COUNT][,Op:Code[:COUNT]…]``
    Answer calls of an operation with that error code (HTTP 503 for throttling and 5xx-style codes, 400
    otherwise) instead of sending them; COUNT limits how many calls fail (default: every call).
``CAPA_TEST_LOSE_RESPONSE=CreateVpc[:COUNT][,RunInstances[:COUNT]…]``
    Let calls of an operation reach the server and succeed there, then make the client see a read timeout
    instead of the answer (COUNT times, default 1): AWS acted, capa does not know the result.
``CAPA_TEST_TRACE_MUTATING=1``
    Log every successful mutating call to the fault log (``{"fault": "none", "mutating": "ec2:CreateVpc",
    "n": 1}``): how a test measures the crash points of a run without crashing it.
``CAPA_TEST_FAULT_LOG=PATH``
    Append one JSON line per injected fault (``{"fault": "crash", "after": "ec2:CreateVpc", "n": 3}``,
    ``{"fault": "error", "operation": "ec2:RunInstances", "code": "..."}``), written before the fault
    takes effect, so a test can say what happened to the process it ran.

Nothing here is known to capa itself: the hooks are registered through
:func:`capa_py.aws.session.register_client_hook`, the extension point for tracing and fault injection.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.client import BaseClient
from botocore.exceptions import ReadTimeoutError

from capa_py.aws.accounting import is_mutating
from capa_py.aws.errors import THROTTLING_CODES, TRANSIENT_CODES

CRASH_AFTER_MUTATING = "CAPA_TEST_CRASH_AFTER_MUTATING"
THROTTLE_RATE = "CAPA_TEST_THROTTLE_RATE"
FAIL_OP = "CAPA_TEST_FAIL_OP"
SEED = "CAPA_TEST_SEED"
TRACE_MUTATING = "CAPA_TEST_TRACE_MUTATING"
LOSE_RESPONSE = "CAPA_TEST_LOSE_RESPONSE"
FAULT_LOG = "CAPA_TEST_FAULT_LOG"
VARIABLES = (CRASH_AFTER_MUTATING, THROTTLE_RATE, FAIL_OP, LOSE_RESPONSE, SEED, TRACE_MUTATING, FAULT_LOG)

ClientHook = Callable[[BaseClient, str], None]


class _Body:
    """The ``raw`` of an :class:`AWSResponse` made up in the client: a body botocore can stream."""

    def __init__(self, content: bytes) -> None:
        self._content = content

    def stream(self, **_: Any) -> Any:
        yield self._content


def _service_protocol(client: BaseClient) -> str:
    return str(client.meta.service_model.protocol)


def error_response(client: BaseClient, url: str, code: str, message: str, status: int) -> AWSResponse:
    """An error response in the wire format of the client's service: EC2's XML, the query protocol's XML,
    or the JSON protocols' body (``{"__type": code, "message": ...}``, Secrets Manager's among them), which
    botocore would misread as an unknown error if it came as XML."""
    request_id = str(uuid.uuid4())
    protocol = _service_protocol(client)
    if protocol in ("json", "rest-json"):
        metadata = client.meta.service_model.metadata
        content_type = f"application/x-amz-json-{metadata.get('jsonVersion', '1.1')}"
        payload = json.dumps({"__type": code, "message": message}).encode()
        headers = {"Content-Type": content_type, "x-amzn-RequestId": request_id, "x-amzn-ErrorType": code}
        return AWSResponse(url, status, headers, _Body(payload))
    if protocol == "ec2":
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
    else:
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
            f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    headers = {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}
    return AWSResponse(url, status, headers, _Body(body.encode()))


def throttling_code(client: BaseClient) -> tuple[str, int]:
    """The code and status a throttled call of the client's service answers with: EC2's
    ``RequestLimitExceeded`` (503), the JSON services' ``ThrottlingException`` (400), the query services'
    ``Throttling`` (400)."""
    protocol = _service_protocol(client)
    if protocol == "ec2":
        return "RequestLimitExceeded", 503
    if protocol in ("json", "rest-json"):
        return "ThrottlingException", 400
    return "Throttling", 400


def _operation_of(event_name: str) -> str:
    # "before-send.ec2.RunInstances" / "after-call.ec2.RunInstances"
    return event_name.rsplit(".", 1)[-1]


@dataclass
class FailRule:
    operation: str
    code: str
    remaining: int | None = None
    """How many more calls to fail; None: every one."""

    @property
    def status(self) -> int:
        if self.code == "RequestLimitExceeded" or self.code in TRANSIENT_CODES:
            return 503
        return 400


def parse_lost_responses(text: str) -> dict[str, int]:
    """``"CreateVpc, RunInstances:2"`` → ``{"CreateVpc": 1, "RunInstances": 2}``."""
    lost: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        operation, _, count = item.partition(":")
        lost[operation] = int(count) if count else 1
    return lost


def parse_fail_rules(text: str) -> list[FailRule]:
    """``"RunInstances:InvalidAMIID.NotFound, CreateVpc:InternalError:1"`` → rules."""
    rules: list[FailRule] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise ValueError(f"{FAIL_OP}: expected Operation:Code[:COUNT], got {item!r}")
        rules.append(FailRule(parts[0], parts[1], int(parts[2]) if len(parts) == 3 else None))
    return rules


@dataclass
class Faults:
    """The faults one capa process injects, shared by every client it makes (and every thread)."""

    crash_after_mutating: int | None = None
    throttle_rate: float = 0.0
    fail_rules: list[FailRule] = field(default_factory=list)
    lose_responses: dict[str, int] = field(default_factory=dict)
    seed: int | None = None
    trace_mutating: bool = False
    log_path: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _mutating_ok: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        if self.seed is not None:
            self._random.seed(self.seed)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Faults:
        crash = environ.get(CRASH_AFTER_MUTATING)
        seed = environ.get(SEED)
        return cls(
            crash_after_mutating=int(crash) if crash else None,
            throttle_rate=float(environ.get(THROTTLE_RATE) or 0.0),
            fail_rules=parse_fail_rules(environ.get(FAIL_OP, "")),
            lose_responses=parse_lost_responses(environ.get(LOSE_RESPONSE, "")),
            seed=int(seed) if seed else None,
            trace_mutating=environ.get(TRACE_MUTATING, "") not in ("", "0"),
            log_path=environ.get(FAULT_LOG) or None,
        )

    @property
    def active(self) -> bool:
        return bool(
            self.crash_after_mutating
            or self.throttle_rate
            or self.fail_rules
            or self.lose_responses
            or self.trace_mutating
        )

    def log(self, **entry: Any) -> None:
        if self.log_path is None:
            return
        with open(self.log_path, "a") as out:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
            out.flush()
            os.fsync(out.fileno())

    # -- hooks ---------------------------------------------------------------------------------------
    def client_hook(self, client: BaseClient, service: str) -> None:
        """Register this process's fault hooks on one new client (a ``register_client_hook`` hook)."""

        def before_send(request: Any, event_name: str, **_: Any) -> AWSResponse | None:
            return self._before_send(client, service, _operation_of(event_name), request)

        def after_call(http_response: Any, parsed: Any, model: Any, **_: Any) -> None:
            self._after_call(service, model.name, http_response, parsed)
            self._lose_response(client, service, model.name, http_response, parsed)

        client.meta.events.register("before-send", before_send)
        client.meta.events.register("after-call", after_call)

    def _before_send(
        self, client: BaseClient, service: str, operation: str, request: Any
    ) -> AWSResponse | None:
        url = str(getattr(request, "url", ""))
        with self._lock:
            rule = next((r for r in self.fail_rules if r.operation == operation and r.remaining != 0), None)
            if rule is not None and rule.remaining is not None:
                rule.remaining -= 1
            throttle = rule is None and self.throttle_rate > 0 and self._random.random() < self.throttle_rate
        if rule is not None:
            self.log(fault="error", operation=f"{service}:{operation}", code=rule.code)
            return error_response(client, url, rule.code, "injected by the test harness", rule.status)
        if throttle:
            code, status = throttling_code(client)
            assert code in THROTTLING_CODES
            return error_response(client, url, code, "Request limit exceeded (injected).", status)
        return None

    def _lose_response(
        self, client: BaseClient, service: str, operation: str, http_response: Any, parsed: Any
    ) -> None:
        if operation not in self.lose_responses or _failed(http_response, parsed):
            return
        with self._lock:
            if self.lose_responses[operation] <= 0:
                return
            self.lose_responses[operation] -= 1
        self.log(fault="lost-response", operation=f"{service}:{operation}")
        raise ReadTimeoutError(endpoint_url=str(client.meta.endpoint_url))

    def _after_call(self, service: str, operation: str, http_response: Any, parsed: Any) -> None:
        if (self.crash_after_mutating is None and not self.trace_mutating) or not is_mutating(operation):
            return
        if _failed(http_response, parsed):
            return
        with self._lock:
            self._mutating_ok += 1
            count = self._mutating_ok
            if self.trace_mutating:
                self.log(fault="none", mutating=f"{service}:{operation}", n=count)
        if count == self.crash_after_mutating:
            self.log(fault="crash", after=f"{service}:{operation}", n=count)
            os.kill(os.getpid(), signal.SIGKILL)


def _failed(http_response: Any, parsed: Any) -> bool:
    return int(getattr(http_response, "status_code", 200)) >= 300 or (
        isinstance(parsed, dict) and "Error" in parsed
    )


def install_from_env(environ: Mapping[str, str] | None = None) -> Faults:
    """Read the ``CAPA_TEST_*`` variables and register the hooks for every client made from now on."""
    from capa_py.aws.session import register_client_hook

    faults = Faults.from_env(os.environ if environ is None else environ)
    if faults.active:
        register_client_hook(faults.client_hook)
    return faults


__all__ = [
    "FailRule",
    "Faults",
    "error_response",
    "install_from_env",
    "parse_fail_rules",
    "parse_lost_responses",
    "throttling_code",
]
