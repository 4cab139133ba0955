"""Resources that stay pending: moto makes NAT gateways available, load balancers active and instances
running at once, so the controllers' waiting paths never run against it unaided.

:class:`PendingStates` registers botocore ``after-call`` handlers on the clients the controllers use; while
a kind is held, every create and describe answer reports the resource in its pending state (``pending``,
``provisioning``), exactly as AWS does for the minutes such a resource takes. Releasing the kind lets the
real state through again. It also counts the create calls that reached AWS, per kind.

:func:`reconcile_pass` runs each controller once over every object of its kind, in a fixed order and on
the calling thread, and returns each reconcile's :class:`~capa_py.ctrlkit.result.Result`: the requeue a
controller asks for is observed directly, without waiting for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.aws.session import AWSClients
from capa_py.ctrlkit.result import Result
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import ObjectStore


def _nat_gateways(parsed: dict[str, Any]) -> list[dict[str, Any]]:
    one = parsed.get("NatGateway")
    return [one] if isinstance(one, dict) else list(parsed.get("NatGateways", []))


def _instances(parsed: dict[str, Any]) -> list[dict[str, Any]]:
    launched = list(parsed.get("Instances", []))
    described = [i for r in parsed.get("Reservations", []) for i in r.get("Instances", [])]
    return launched + described


def _set_top(item: dict[str, Any], state: str) -> None:
    item["State"] = state


def _get_top(item: dict[str, Any]) -> str | None:
    return item.get("State")


def _set_code(item: dict[str, Any], state: str) -> None:
    item.setdefault("State", {})["Code"] = state


def _get_code(item: dict[str, Any]) -> str | None:
    return item.get("State", {}).get("Code")


def _set_name(item: dict[str, Any], state: str) -> None:
    item["State"] = {"Code": 0, "Name": state}


def _get_name(item: dict[str, Any]) -> str | None:
    return item.get("State", {}).get("Name")


@dataclass(frozen=True)
class PendingKind:
    service: str
    create: str
    describe: str
    ready: str
    pending: str
    items: Callable[[dict[str, Any]], list[dict[str, Any]]]
    get_state: Callable[[dict[str, Any]], str | None]
    set_state: Callable[[dict[str, Any], str], None]


KINDS = {
    "nat-gateway": PendingKind(
        "ec2",
        "CreateNatGateway",
        "DescribeNatGateways",
        "available",
        "pending",
        _nat_gateways,
        _get_top,
        _set_top,
    ),
    "load-balancer": PendingKind(
        "elbv2",
        "CreateLoadBalancer",
        "DescribeLoadBalancers",
        "active",
        "provisioning",
        lambda parsed: list(parsed.get("LoadBalancers", [])),
        _get_code,
        _set_code,
    ),
    "instance": PendingKind(
        "ec2", "RunInstances", "DescribeInstances", "running", "pending", _instances, _get_name, _set_name
    ),
}


class PendingStates:
    """Hold chosen kinds in their pending state in every answer the given clients receive."""

    def __init__(self, aws: AWSClients, kinds: Iterable[str]) -> None:
        self.held: set[str] = set()
        self.creates: Counter[str] = Counter()
        self.rewritten: Counter[str] = Counter()
        for kind in kinds:
            self._install(aws, kind)

    def _install(self, aws: AWSClients, kind: str) -> None:
        spec = KINDS[kind]
        raw = aws.client(spec.service).raw
        service_id = raw.meta.service_model.service_id.hyphenize()

        def rewrite(parsed: dict[str, Any], **_: Any) -> None:
            if kind not in self.held:
                return
            for item in spec.items(parsed):
                if spec.get_state(item) == spec.ready:
                    spec.set_state(item, spec.pending)
                    self.rewritten[kind] += 1

        def count_create(parsed: dict[str, Any], **_: Any) -> None:
            if "Error" not in parsed:
                self.creates[kind] += 1

        raw.meta.events.register(f"after-call.{service_id}.{spec.create}", count_create)
        raw.meta.events.register(f"after-call.{service_id}.{spec.create}", rewrite)
        raw.meta.events.register(f"after-call.{service_id}.{spec.describe}", rewrite)

    def hold(self, kind: str) -> None:
        self.held.add(kind)

    def release(self, kind: str) -> None:
        self.held.discard(kind)


def passes_until(
    controllers: Sequence[Any],
    store: ObjectStore,
    done: Callable[[], bool],
    what: str,
    explain: Callable[[], str],
    max_passes: int,
) -> dict[ObjectKey, Result]:
    """Reconcile pass after pass until ``done()``, returning the last pass's results; fails naming ``what``
    and ``explain()`` (where things stand) if it has not happened after ``max_passes``."""
    for _ in range(max_passes):
        results = reconcile_pass(controllers, store)
        if done():
            return results
    raise AssertionError(f"{what} did not happen in {max_passes} passes: {explain()}")


def reconcile_pass(controllers: Iterable[Any], store: ObjectStore) -> dict[ObjectKey, Result]:
    """Every controller reconciles every object of its kind once, in the order given."""
    results: dict[ObjectKey, Result] = {}
    for controller in controllers:
        for obj in store.list(controller.kind):
            key = ObjectKey(controller.kind.KIND, obj.metadata.namespace or "", obj.name)
            results[key] = controller.reconcile(key)
    return results
