"""What the engine tests need besides moto: faults on botocore events, a status store that fails on demand,
the owning AWSCluster, engines per strategy class, and counts of what exists in AWS.

Faults are botocore event handlers registered on the clients the test actually uses (the ``aws`` fixtures
make their clients once per server, so a hook registered for *new* clients would never reach them):

* ``fail`` answers ``before-send`` with an AWS error, so the request never reaches the server;
* ``crash_after`` raises :class:`SimulatedCrash` from ``after-call``: AWS did the work, the process died
  before the caller saw the response (nothing recorded, nothing tagged);
* ``crash_before`` raises it from ``before-send``: the process died just before the call;
* ``lose_response`` raises an HTTP 500 ``ClientError`` from ``after-call``: AWS did the work, the caller
  sees an internal error;
* ``rewrite`` changes a parsed response (AWS states moto does not keep, such as a NAT gateway ``deleting``).

:class:`FlakyStatusStore` wraps a real :class:`~capa_py.store.SQLiteStore` and raises
:class:`~capa_py.store.errors.StoreError` from ``update_status`` for the writes a test chooses, as an API
server outage would; everything else reaches the real store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from capa_py.api.aws import AWSCluster, AWSClusterSpec, AWSClusterStatus, NetworkSpec, VPCSpec
from capa_py.api.meta import ObjectMeta
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.profiles import MOTO, EndpointProfile
from capa_py.engine.recorder import StatusRecorder
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tags import lookup_tags
from capa_py.store import SQLiteStore
from capa_py.store.errors import StoreError
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.instance import Instance
from resources.internet_gateway import InternetGateway, InternetGatewayDesired
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route_table import RouteTable, RouteTableDesired
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired
from tests.resources.builders import CLUSTER, REGION, ZONE, Builder

NAMESPACE = "default"

# -- strategy classes over real resources --------------------------------------------------------------

CLASS_OVERRIDES: dict[int, dict[str, bool]] = {
    2: {"tag_on_create": False, "client_token": True, "taggable": True},
    3: {"tag_on_create": False, "client_token": False, "taggable": True},
    4: {"tag_on_create": False, "client_token": True, "taggable": False},
    5: {"tag_on_create": False, "client_token": False, "taggable": False},
}
"""Per-kind trait overrides that put a resource class into strategy class 2-5 (class 1: as declared).

The ``moto`` profile lowers ``client_token`` for every kind (``"*"``); a per-kind override wins over it,
so classes 2 and 4 get their token back — to be used against the token-honouring server only."""


def engine_for(strategy: int, *kinds: str, base: EndpointProfile = MOTO) -> Engine:
    """An engine whose profile puts ``kinds`` into ``strategy`` (1: as declared, tokens lowered)."""
    if strategy == 1:
        return Engine(base)
    overrides = dict.fromkeys(kinds, CLASS_OVERRIDES[strategy])
    return Engine(base.with_overrides(overrides, name=f"{base.name}+class{strategy}"))


# -- faults ---------------------------------------------------------------------------------------------


class SimulatedCrash(BaseException):
    """The controller process dying. A BaseException, so neither the engine nor botocore nor tenacity
    handles it: it unwinds the reconcile exactly where the process would have stopped."""


@dataclass
class Injection:
    """One fault: how many calls of its operation went by, and how many it hit."""

    operation: str
    seen: int = 0
    fired: int = 0
    params: list[dict[str, Any]] = field(default_factory=list)

    def hits(self, times: int | None) -> bool:
        self.seen += 1
        if times is not None and self.fired >= times:
            return False
        self.fired += 1
        return True


class _Body:
    """The raw body botocore reads an :class:`AWSResponse` from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterable[bytes]:
        return [self._data]


def ec2_error_response(url: str, code: str, status: int, message: str) -> AWSResponse:
    """An EC2 (query protocol) error response, as botocore's EC2 parser expects it."""
    body = (
        "<?xml version='1.0' encoding='UTF-8'?>"
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>fault-injection</RequestID></Response>"
    ).encode()
    headers: Any = {"Content-Type": "text/xml;charset=UTF-8"}
    return AWSResponse(url, status, headers, _Body(body))


def error_response(url: str, code: str, status: int, message: str, service: str = "ec2") -> AWSResponse:
    """An error response in the service's own wire format: EC2's query ``<Response><Errors>``, S3's bare
    ``<Error>``, and the ``<ErrorResponse>`` of the other REST-XML services (Route 53)."""
    if service == "ec2":
        return ec2_error_response(url, code, status, message)
    error = f"<Code>{code}</Code><Message>{message}</Message>"
    if service == "s3":
        body = (
            "<?xml version='1.0' encoding='UTF-8'?>"
            f"<Error>{error}<RequestId>fault-injection</RequestId></Error>"
        )
    else:
        body = (
            "<?xml version='1.0' encoding='UTF-8'?>"
            f"<ErrorResponse><Error><Type>Sender</Type>{error}</Error>"
            "<RequestId>fault-injection</RequestId></ErrorResponse>"
        )
    headers: Any = {"Content-Type": "application/xml"}
    return AWSResponse(url, status, headers, _Body(body.encode()))


class Faults:
    """Faults registered on real clients' botocore events; :meth:`clear` (the fixture's teardown)
    unregisters every one."""

    def __init__(self) -> None:
        self._registered: list[tuple[Any, str, Callable[..., Any]]] = []

    def _register(self, aws: AWSClients, service: str, event: str, handler: Callable[..., Any]) -> None:
        events = aws.client(service).raw.meta.events
        events.register(event, handler)
        self._registered.append((events, event, handler))

    def fail(
        self,
        aws: AWSClients,
        operation: str,
        code: str = "UnauthorizedOperation",
        status: int = 403,
        times: int | None = None,
        service: str = "ec2",
    ) -> Injection:
        """``operation`` is answered with an error before it reaches AWS (``times`` times, or always).

        The default, a missing permission, is not retried by ``AWSClient.call``, so tests stay fast."""
        injection = Injection(operation)

        def refuse(request: Any, **_: Any) -> AWSResponse | None:
            if not injection.hits(times):
                return None
            return error_response(request.url, code, status, f"{operation} refused by the test", service)

        self._register(aws, service, f"before-send.{service}.{operation}", refuse)
        return injection

    def crash_after(self, aws: AWSClients, operation: str, times: int = 1, service: str = "ec2") -> Injection:
        """The process dies right after ``operation`` succeeded in AWS, before anyone saw the response."""
        injection = Injection(operation)

        def die(http_response: Any, **_: Any) -> None:
            if http_response.status_code < 300 and injection.hits(times):
                raise SimulatedCrash(f"the process died right after {operation} succeeded")

        self._register(aws, service, f"after-call.{service}.{operation}", die)
        return injection

    def crash_before(
        self, aws: AWSClients, operation: str, times: int = 1, service: str = "ec2"
    ) -> Injection:
        """The process dies just before sending ``operation``."""
        injection = Injection(operation)

        def die(**_: Any) -> None:
            if injection.hits(times):
                raise SimulatedCrash(f"the process died just before {operation}")

        self._register(aws, service, f"before-send.{service}.{operation}", die)
        return injection

    def lose_response(
        self, aws: AWSClients, operation: str, times: int = 1, service: str = "ec2"
    ) -> Injection:
        """``operation`` succeeds in AWS but the caller gets HTTP 500 ``InternalError`` instead."""
        injection = Injection(operation)

        def lose(http_response: Any, **_: Any) -> None:
            if http_response.status_code < 300 and injection.hits(times):
                response: Any = {
                    "Error": {"Code": "InternalError", "Message": "response lost by the test"},
                    "ResponseMetadata": {"HTTPStatusCode": 500},
                }
                raise ClientError(response, operation)

        self._register(aws, service, f"after-call.{service}.{operation}", lose)
        return injection

    def rewrite(
        self, aws: AWSClients, operation: str, change: Callable[[dict[str, Any]], None], service: str = "ec2"
    ) -> Injection:
        """Every successful response of ``operation`` is changed in place by ``change(parsed)``."""
        injection = Injection(operation)

        def edit(http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
            if http_response.status_code < 300 and injection.hits(None):
                change(parsed)

        self._register(aws, service, f"after-call.{service}.{operation}", edit)
        return injection

    def interleave(
        self,
        aws: AWSClients,
        operation: str,
        action: Callable[[], Any],
        times: int = 1,
        service: str = "ec2",
    ) -> Injection:
        """Right after ``operation`` succeeded in AWS, before its caller sees the response, ``action`` runs
        (a second process's reconcile racing the first): the first ``times`` successes only."""
        injection = Injection(operation)

        def run(http_response: Any, **_: Any) -> None:
            if http_response.status_code < 300 and injection.hits(times):
                action()

        self._register(aws, service, f"after-call.{service}.{operation}", run)
        return injection

    def watch(self, aws: AWSClients, operation: str, service: str = "ec2") -> Injection:
        """Record the parameters of every ``operation`` call (``injection.params``); changes nothing."""
        injection = Injection(operation)

        def note(params: dict[str, Any], **_: Any) -> None:
            injection.hits(None)
            injection.params.append(dict(params))

        self._register(aws, service, f"before-parameter-build.{service}.{operation}", note)
        return injection

    def clear(self) -> None:
        while self._registered:
            events, event, handler = self._registered.pop()
            events.unregister(event, handler)


# -- the owning object and its status ---------------------------------------------------------------------


@dataclass
class StatusWriteRule:
    when: Callable[[AWSCluster], bool]
    times: int | None
    fired: int = 0


class FlakyStatusStore:
    """A real store whose ``update_status`` fails for the writes a test chooses."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self._rules: list[StatusWriteRule] = []

    def fail_status_writes(
        self, when: Callable[[AWSCluster], bool] = lambda _: True, times: int | None = None
    ) -> StatusWriteRule:
        """Status writes for which ``when(new object)`` holds fail (``times`` times, or until healed)."""
        rule = StatusWriteRule(when, times)
        self._rules.append(rule)
        return rule

    def heal(self) -> None:
        self._rules.clear()

    def update_status(self, obj: Any) -> Any:
        for rule in self._rules:
            if (rule.times is None or rule.fired < rule.times) and rule.when(obj):
                rule.fired += 1
                raise StoreError(f"{obj.ref()}: status write refused by the test (API server unavailable)")
        return self.store.update_status(obj)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def records(role: str) -> Callable[[AWSCluster], bool]:
    """Status writes that carry a record for ``role`` (the engine's record, not its intent)."""
    return lambda obj: role in obj.status.resources


def intents(role: str) -> Callable[[AWSCluster], bool]:
    """Status writes that carry an intent for ``role`` and no record yet."""
    return lambda obj: role in obj.status.intents and role not in obj.status.resources


@dataclass
class Owner:
    """The AWSCluster owning the resources, persisted in the store; every reconcile re-reads it."""

    store: FlakyStatusStore
    name: str = CLUSTER

    @classmethod
    def create(cls, store: FlakyStatusStore, name: str = CLUSTER) -> Owner:
        store.store.create(
            AWSCluster(
                metadata=ObjectMeta(name=name, namespace=NAMESPACE),
                spec=AWSClusterSpec(
                    region=REGION, network=NetworkSpec(vpc=VPCSpec(cidr_block="10.0.0.0/16"))
                ),
            )
        )
        return cls(store, name)

    def persisted(self) -> AWSCluster:
        return self.store.store.get(AWSCluster, self.name, NAMESPACE)

    @property
    def uid(self) -> str:
        return self.persisted().uid

    def status(self) -> AWSClusterStatus:
        return self.persisted().status

    def scope(self, additional_tags: Mapping[str, str] | None = None, cluster: str | None = None) -> Scope:
        """What a fresh reconcile (or a restarted process) works with: the object as persisted."""
        obj = self.persisted()
        return Scope(
            cluster=cluster or self.name,
            owner_uid=obj.uid,
            recorder=StatusRecorder(self.store, obj),
            additional_tags=dict(additional_tags or {}),
        )


# -- what exists in AWS ------------------------------------------------------------------------------------


def _items(aws: AWSClients, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    return list(aws.ec2.pages(operation, key, **params))


def tags_of(item: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in item.get("Tags", [])}


def vpcs(aws: AWSClients) -> dict[str, dict[str, str]]:
    """Every non-default VPC: id → tags."""
    return {v["VpcId"]: tags_of(v) for v in _items(aws, "DescribeVpcs", "Vpcs") if not v.get("IsDefault")}


def subnets(aws: AWSClients, vpc_id: str) -> dict[str, dict[str, str]]:
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}]
    return {s["SubnetId"]: tags_of(s) for s in _items(aws, "DescribeSubnets", "Subnets", Filters=filters)}


def addresses(aws: AWSClients) -> dict[str, dict[str, str]]:
    return {a["AllocationId"]: tags_of(a) for a in _items(aws, "DescribeAddresses", "Addresses")}


def nat_gateways(aws: AWSClients) -> dict[str, dict[str, str]]:
    """Live NAT gateways (moto keeps deleted ones visible, as AWS does for an hour)."""
    found = _items(aws, "DescribeNatGateways", "NatGateways")
    return {g["NatGatewayId"]: tags_of(g) for g in found if g.get("State") in ("pending", "available")}


def route_tables(aws: AWSClients, vpc_id: str) -> dict[str, dict[str, str]]:
    """The VPC's route tables except its main one."""
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}]
    return {
        t["RouteTableId"]: tags_of(t)
        for t in _items(aws, "DescribeRouteTables", "RouteTables", Filters=filters)
        if not any(a.get("Main") for a in t.get("Associations", []))
    }


def internet_gateways(aws: AWSClients) -> dict[str, dict[str, str]]:
    found = _items(aws, "DescribeInternetGateways", "InternetGateways")
    return {g["InternetGatewayId"]: tags_of(g) for g in found}


def instances(aws: AWSClients) -> dict[str, dict[str, str]]:
    """Live (not terminated) instances."""
    found = _items(aws, "DescribeInstances", "Reservations")
    return {
        i["InstanceId"]: tags_of(i)
        for r in found
        for i in r.get("Instances", [])
        if i.get("State", {}).get("Name") not in ("shutting-down", "terminated")
    }


def carries_lookup_tags(tags: Mapping[str, str], role: str, cluster: str = CLUSTER) -> bool:
    """Whether a resource carries the tags the engine finds ``role`` by."""
    return all(tags.get(k) == v for k, v in lookup_tags(cluster, role).items())


# -- real resource kinds driven through the engine ------------------------------------------------------

Live = Callable[[AWSClients], dict[str, dict[str, str]]]
"""What exists of a kind in the account: id → tags."""


@dataclass(frozen=True)
class Subject:
    """A real resource kind the matrix drives: its class, the role it plays, its desired state (made with
    its prerequisites by ``prepare``) and how to list what exists of it."""

    role: str
    cls: type[ResourceClass[Any]]
    delete_operation: str
    prepare: Callable[[Builder], tuple[Any, Live]]

    @property
    def kind(self) -> str:
        return self.cls.kind

    @property
    def create_operation(self) -> str:
        return self.cls.create_operation

    def __str__(self) -> str:
        return self.kind


def _vpc(build: Builder) -> tuple[Any, Live]:
    return VpcDesired("10.20.0.0/16"), vpcs


def _subnet(build: Builder) -> tuple[Any, Live]:
    vpc_id = build.vpc().id
    return SubnetDesired(vpc_id, "10.0.7.0/24", ZONE), lambda aws: subnets(aws, vpc_id)


def _instance(build: Builder) -> tuple[Any, Live]:
    return build.instance_desired(build.subnet().id), instances


def _nat_gateway(build: Builder) -> tuple[Any, Live]:
    subnet_id = build.subnet(public=True).id
    return NatGatewayDesired(subnet_id, build.elastic_ip().id), nat_gateways


def _route_table(build: Builder) -> tuple[Any, Live]:
    vpc_id = build.vpc().id
    return RouteTableDesired(vpc_id), lambda aws: route_tables(aws, vpc_id)


def _elastic_ip(build: Builder) -> tuple[Any, Live]:
    return ElasticIpDesired(), addresses


def _internet_gateway(build: Builder) -> tuple[Any, Live]:
    return InternetGatewayDesired(), internet_gateways


SUBJECTS: dict[str, Subject] = {
    s.kind: s
    for s in (
        Subject("vpc", Vpc, "DeleteVpc", _vpc),
        Subject("public-subnet-a", Subnet, "DeleteSubnet", _subnet),
        Subject("control-plane-0", Instance, "TerminateInstances", _instance),
        Subject("nat-gateway-a", NatGateway, "DeleteNatGateway", _nat_gateway),
        Subject("private-route-table-a", RouteTable, "DeleteRouteTable", _route_table),
        Subject("nat-address-a", ElasticIp, "ReleaseAddress", _elastic_ip),
        Subject("internet-gateway", InternetGateway, "DeleteInternetGateway", _internet_gateway),
    )
}
