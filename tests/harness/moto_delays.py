"""Make a moto server take AWS's time: NAT gateways, load balancers and instances start out not ready.

moto makes a NAT gateway ``available``, an instance ``running`` and a load balancer ``active`` (on the first
describe) at once; on AWS they take minutes, and a reconciler's calls and time to Ready depend on how it
waits for them. This server program patches moto's models so that, for a configurable time after each
resource's creation, every answer about it — the create call's own answer, describes, describe filters,
and moto's checks that read the state (``RegisterTargets`` refuses a target that is not running, as AWS
does) — reports the state AWS reports while it is still being made:

==========================  ==========================  =============  ==============
resource                    reported during the delay   then           default delay
==========================  ==========================  =============  ==============
NAT gateway                 ``pending``                 ``available``  90 s
ELBv2 load balancer         ``provisioning``            ``active``     150 s
EC2 instance                ``pending`` (code 0)        ``running``    45 s
==========================  ==========================  =============  ==============

Each delay counts from that resource's creation in the server process (``time.monotonic``); ``scale``
multiplies all of them (0.1 for a ten times faster run). Only the ready state is held back: a NAT gateway
deleted, or an instance stopped or terminated, during its delay reports that at once.

Importing this module changes nothing; :func:`install` patches the model classes in the current process (a
state property in place of the plain attribute; the real state is kept beside it). The patches are on the
classes, so ``POST /moto-api/reset`` forgets the resources and keeps the delays.

Run it as the server program: ``python -m tests.harness.moto_delays --port N [--nat-delay 90] [--lb-delay
150] [--instance-delay 45] [--scale 1] [--honour-tokens]``; or start it from Python with
``start_moto_server(delays=Delays(...))`` (``tests/harness/moto_server.py``).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Delays:
    """Seconds each kind of resource stays not ready after its creation (before ``scale``)."""

    nat_gateway: float = 90.0
    load_balancer: float = 150.0
    instance: float = 45.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("nat_gateway", "load_balancer", "instance", "scale"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    def seconds(self, kind: str) -> float:
        """The effective delay of ``kind`` (``nat_gateway``, ``load_balancer`` or ``instance``)."""
        return float(getattr(self, kind)) * self.scale

    def arguments(self) -> list[str]:
        """The server program's options for these delays."""
        return [
            "--nat-delay", f"{self.nat_gateway:g}",
            "--lb-delay", f"{self.load_balancer:g}",
            "--instance-delay", f"{self.instance:g}",
            "--scale", f"{self.scale:g}",
        ]  # fmt: skip

    def as_dict(self) -> dict[str, float]:
        """The effective delays in seconds, by kind."""
        return {kind: self.seconds(kind) for kind in ("nat_gateway", "load_balancer", "instance")}


_BORN = "_capa_delay_born"
_lock = threading.Lock()
_delays: Delays | None = None


def active() -> Delays | None:
    """The delays installed in this process, or None."""
    return _delays


class _DelayedState:
    """A data descriptor in place of a model's plain state attribute (``NatGateway.state``,
    ``FakeLoadBalancer.state``, ``InstanceState.name`` and ``.code``).

    Setting stores the real value on the object (and, the first time, the object's birth time); getting
    answers ``pending`` instead of the real value while the real value is the ready one and the object is
    younger than its kind's delay."""

    def __init__(self, kind: str, ready: str, pending: Any, watch: str | None = None) -> None:
        self.kind = kind
        self.ready = ready
        """the ready state's name (of the watched attribute when there is one)"""
        self.pending = pending
        # InstanceState.code follows its .name: the code reads as pending while the name does.
        self.watch = watch

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_capa_real_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        real = obj.__dict__.get(self.slot)
        watched = obj.__dict__.get(f"_capa_real_{self.watch}") if self.watch else real
        if watched == self.ready and _young(obj, self.kind):
            return self.pending
        return real

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__.setdefault(_BORN, time.monotonic())
        obj.__dict__[self.slot] = value


def _young(obj: Any, kind: str) -> bool:
    delays = _delays
    if delays is None:
        return False
    born = obj.__dict__.get(_BORN)
    return born is not None and time.monotonic() - born < delays.seconds(kind)


def _install_descriptor(cls: type, name: str, descriptor: _DelayedState) -> None:
    descriptor.__set_name__(cls, name)
    setattr(cls, name, descriptor)


def install(delays: Delays) -> None:
    """Patch moto's NAT gateway, load balancer and instance models in this process. Calling it again only
    changes the delays (for resources created before, too)."""
    global _delays
    from moto.ec2.models.instances import InstanceState
    from moto.ec2.models.nat_gateways import NatGateway
    from moto.elbv2.models import FakeLoadBalancer

    with _lock:
        if _delays is None:
            _install_descriptor(NatGateway, "state", _DelayedState("nat_gateway", "available", "pending"))
            _install_descriptor(
                FakeLoadBalancer, "state", _DelayedState("load_balancer", "active", "provisioning")
            )
            _install_descriptor(InstanceState, "name", _DelayedState("instance", "running", "pending"))
            _install_descriptor(InstanceState, "code", _DelayedState("instance", "running", 0, watch="name"))
        _delays = delays


def serve(port: int, delays: Delays, honour_tokens: bool = False) -> None:
    """Install the delays (and the ClientToken wrapper if asked) and serve moto on 127.0.0.1:``port``."""
    from moto.server import main as moto_main

    from tests.harness import moto_autoscaling

    install(delays)
    moto_autoscaling.install()
    if honour_tokens:
        from tests.harness import moto_tokens

        moto_tokens.install()
    moto_main(["--host", "127.0.0.1", "--port", str(port)])


def add_delay_options(parser: argparse.ArgumentParser) -> None:
    """``--nat-delay``, ``--lb-delay`` and ``--instance-delay`` (seconds, defaulting to :class:`Delays`)."""
    defaults = Delays()
    for option, default, what in (
        ("--nat-delay", defaults.nat_gateway, "NAT gateways pending after creation"),
        ("--lb-delay", defaults.load_balancer, "load balancers provisioning"),
        ("--instance-delay", defaults.instance, "instances pending"),
    ):
        parser.add_argument(
            option, type=float, default=default, metavar="SECONDS", help=f"{what} (default {default:g})"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="moto on 127.0.0.1 whose NAT gateways, load balancers and instances take AWS's time"
    )
    parser.add_argument("--port", type=int, required=True)
    add_delay_options(parser)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every delay (default 1)")
    parser.add_argument("--honour-tokens", action="store_true", help="also honour EC2 ClientToken")
    return parser.parse_args(argv)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        delays = Delays(args.nat_delay, args.lb_delay, args.instance_delay, args.scale)
    except ValueError as exc:
        sys.exit(f"moto_delays: {exc}")
    serve(args.port, delays, honour_tokens=args.honour_tokens)


if __name__ == "__main__":
    main()
