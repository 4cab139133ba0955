"""Make a moto server honour ``ClientToken`` for the creates capa-py sends one with.

moto 5.2 accepts ``ClientToken`` and ignores it: a repeated ``RunInstances`` with the same token starts a
second instance. Real EC2 documents idempotent creates (the "Ensuring idempotency" page of the EC2 API
reference): a request repeated with the same client token, in the same account and region, returns the
result of the original request instead of creating again, and the same token with different parameters is
rejected with ``IdempotentParameterMismatch``.

Importing this module changes nothing; :func:`install` wraps moto's EC2 response handlers for
``RunInstances``, ``CreateNatGateway``, ``CreateRouteTable``, ``CreateLaunchTemplate`` and
``CreateLaunchTemplateVersion`` in the current process. The first request
with a token runs moto's handler and remembers the model object it returned (the reservation, the NAT
gateway, the route table) with a digest of the request; a repeat returns that same object, serialized
afresh (so a repeat sees the current state, as AWS's does; moto builds the launch template responses as
plain mappings, so a repeat of those returns the original response as it was). The memory lives on the
per-account, per-region EC2 backend object, so ``POST /moto-api/reset`` forgets it together with the
resources.

Route 53's ``CreateHostedZone`` takes a ``CallerReference`` instead, which moto 5.2 also ignores (a repeat
makes a second zone). The Route 53 API reference documents the reference as what lets a failed create be
retried without creating twice, and ``HostedZoneAlreadyExists`` as the error "when a hosted zone has already
been created with the specified CallerReference"; :func:`install` therefore also wraps moto's Route 53
``create_hosted_zone`` handler so that a reference already used (by a zone that exists, or one deleted
since: AWS asks for a unique reference on every create) is refused with ``HostedZoneAlreadyExists``, and
nothing is created. The references used live on the Route 53 backend, so a reset forgets them too.

Run a token-honouring server with ``python -m tests.harness.moto_tokens --port N`` (or run this file by
path): it installs the wrapper, then serves moto on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

# What each wrapped operation's handler returns the created object under (``None``: the result itself).
TOKEN_OPERATIONS: dict[str, str | None] = {
    "run_instances": None,
    "create_nat_gateway": "NatGateway",
    "create_route_table": "RouteTable",
    "create_launch_template": "LaunchTemplate",
    "create_launch_template_version": "LaunchTemplateVersion",
}

_REGISTRY_ATTRIBUTE = "_capa_client_tokens"
_lock = threading.Lock()
_installed = False


def _request_digest(params: dict[str, Any]) -> str:
    """A digest of the request without its token: the same token with another digest is a mismatch."""
    body = {k: v for k, v in params.items() if k != "ClientToken"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _wrap(handler: Callable[[Any], Any], operation: str, result_key: str | None) -> Callable[[Any], Any]:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError

    @functools.wraps(handler)
    def honouring_token(response: Any) -> Any:
        token = response._get_param("ClientToken")
        if not token:
            return handler(response)
        backend = response.ec2_backend
        digest = _request_digest(dict(response.params))
        with _lock:
            registry: dict[tuple[str, str], tuple[str, Any]] = vars(backend).setdefault(
                _REGISTRY_ATTRIBUTE, {}
            )
            remembered = registry.get((operation, token))
            if remembered is not None:
                original_digest, created = remembered
                if original_digest != digest:
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        "The client token you have provided is associated with a resource that is already "
                        "deleted or uses different parameters. Use a different client token.",
                    )
                return ActionResult(created if result_key is None else {result_key: created})
            result = handler(response)
            if isinstance(result, ActionResult):
                payload = result.result
                created = payload if result_key is None else payload[result_key]  # type: ignore[index]
                registry[(operation, token)] = (digest, created)
            return result

    return honouring_token


_CALLER_REFERENCES_ATTRIBUTE = "_capa_caller_references"


def _wrap_create_hosted_zone(handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    from moto.route53.exceptions import Route53ClientError

    @functools.wraps(handler)
    def honouring_caller_reference(response: Any) -> Any:
        reference = response._get_param("CallerReference")
        backend = response.backend
        with _lock:
            used: set[str] = vars(backend).setdefault(_CALLER_REFERENCES_ATTRIBUTE, set())
            used |= {z.caller_reference for z in backend.zones.values()}
            if reference in used:
                raise Route53ClientError(
                    "HostedZoneAlreadyExists",
                    f"A hosted zone has already been created with the specified caller reference {reference}",
                )
            result = handler(response)
            used.add(reference)
            return result

    return honouring_caller_reference


def install() -> None:
    """Wrap moto's EC2 handlers in this process so that ``ClientToken`` is honoured, and Route 53's
    ``CreateHostedZone`` so that ``CallerReference`` is. Idempotent."""
    global _installed
    from moto.ec2.responses import EC2Response
    from moto.route53.responses import Route53

    with _lock:
        if _installed:
            return
        for operation, result_key in TOKEN_OPERATIONS.items():
            # Set on EC2Response itself: it wins over the mixin that defines the handler.
            setattr(EC2Response, operation, _wrap(getattr(EC2Response, operation), operation, result_key))
        Route53.create_hosted_zone = _wrap_create_hosted_zone(Route53.create_hosted_zone)  # type: ignore[method-assign]
        _installed = True


def installed() -> bool:
    return _installed


def serve(port: int) -> None:
    """Install the token wrapper (and the Auto Scaling calls moto lacks:
    ``tests/harness/moto_autoscaling.py``) and serve moto on 127.0.0.1:``port`` until interrupted."""
    from moto.server import main as moto_main

    from tests.harness import moto_autoscaling

    install()
    moto_autoscaling.install()
    moto_main(["--host", "127.0.0.1", "--port", str(port)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto server that honours EC2 ClientToken (loopback only)")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    serve(args.port)


if __name__ == "__main__":
    main()
