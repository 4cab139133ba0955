"""The load balancer service: the API server's network load balancer, target group and listener, the
wait for the load balancer, and the control-plane endpoint.

1. :func:`reconcile_load_balancer` — the three, created but not waited for; the target group's ARN goes to
   ``status.network`` at once, so control-plane machines register while the load balancer provisions;
2. :func:`wait_for_load_balancer` — polls the load balancer alone while it provisions;
3. :func:`mark_ready` — the endpoint (the load balancer's DNS name) when the spec sets none, and ready.

:data:`DELETION` deletes the listener, the load balancer and the target group, in that order.
"""

from __future__ import annotations

import hashlib
import re

from capa_py.api.aws import AWSCluster, LoadBalancerStatus
from capa_py.api.cluster import APIEndpoint
from capa_py.engine.errors import Waiting
from capa_py.logging import get_logger
from controllers.services.cluster_scope import API_SERVER_PORT, ClusterScope, Deletion, roles
from controllers.services.dns import RECORD_ROLE
from controllers.waits import LOAD_BALANCER_AVAILABLE
from resources.listener import ListenerDesired
from resources.load_balancer import LoadBalancerDesired
from resources.target_group import TargetGroupDesired

LOAD_BALANCER_READY = "LoadBalancerReady"
CONDITIONS = (LOAD_BALANCER_READY,)
ROLES = ("apiserver-lb", "apiserver-tg", "apiserver-listener")
_log = get_logger("controller.awscluster")
_ELB_INVALID = re.compile(r"[^A-Za-z0-9-]+")


def aws_name(cluster: str, suffix: str, limit: int = 32) -> str:
    """An ELB-style name (load balancers, target groups): at most ``limit`` alphanumerics and hyphens, no
    leading or trailing hyphen, not starting with ``internal-``; the same for the same cluster, and unique
    per cluster.

    ``<cluster>-<suffix>`` when that is already such a name (so existing resources keep theirs); otherwise
    invalid characters (a cluster name may hold dots) become hyphens, and a short hash of the original name
    is appended, so ``my.cluster`` and ``my-cluster`` still get different names.
    """
    name = f"{cluster}-{suffix}"
    clean = _ELB_INVALID.sub("-", name).strip("-")
    if clean.lower().startswith("internal-"):
        clean = "int-" + clean[len("internal-") :]
    if clean == name and len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{clean[: limit - 7].rstrip('-')}-{digest}"


def lb_subnets(scope: ClusterScope) -> tuple[str, ...]:
    """One subnet per zone, public for an internet-facing load balancer, private for an internal one (any
    subnet when the cluster has none of that kind)."""
    wanted_public = scope.obj.spec.control_plane_load_balancer.scheme == "internet-facing"
    subnets = scope.network.subnets
    by_zone: dict[str, str] = {}
    for subnet in subnets:
        if subnet.is_public == wanted_public:
            by_zone.setdefault(subnet.availability_zone, subnet.id)
    if not by_zone:
        by_zone = {s.availability_zone: s.id for s in subnets}
    return tuple(by_zone[z] for z in sorted(by_zone))


def reconcile_load_balancer(scope: ClusterScope) -> None:
    """The load balancer, its target group and listener, created but not waited for.

    A load balancer still provisioning at the end of the last pass, with all three recorded, is not
    described here: the wait step polls it alone."""
    assert scope.network.vpc_id is not None
    name = scope.obj.spec.control_plane_load_balancer.name or aws_name(scope.cluster_name, "apiserver")
    recorded = scope.obj.status.network.api_server_load_balancer
    records = [scope.recorder.recorded(r) for r in ROLES]
    if (
        LOAD_BALANCER_READY in scope.waiting_before
        and recorded is not None
        and recorded.name == name
        and [r.id if r is not None else None for r in records]
        == [recorded.arn, recorded.target_group_arn, recorded.listener_arn]
    ):
        scope.network.load_balancer = recorded.model_copy()
        scope.load_balancer.to_poll = recorded.arn
        return
    _ensure_load_balancer(scope, name)


def _ensure_load_balancer(scope: ClusterScope, name: str) -> None:
    vpc_id = scope.network.vpc_id
    assert vpc_id is not None
    spec = scope.obj.spec.control_plane_load_balancer
    rcs = scope.resources
    before = scope.recorder.recorded("apiserver-lb")
    lb = scope.ensure(
        rcs.load_balancer,
        "apiserver-lb",
        LoadBalancerDesired(
            name,
            lb_subnets(scope),
            spec.scheme,
            cross_zone=spec.cross_zone_load_balancing,
            security_group_ids=tuple(spec.additional_security_groups),
        ),
    )
    tg = scope.ensure(
        rcs.target_group,
        "apiserver-tg",
        TargetGroupDesired(aws_name(scope.cluster_name, "apiserver-tg"), vpc_id),
    )
    listener = scope.ensure(
        rcs.listener, "apiserver-listener", ListenerDesired(lb.id, tg.id, API_SERVER_PORT)
    )
    scope.network.load_balancer = LoadBalancerStatus(
        name=name,
        arn=lb.id,
        dns_name=lb.attributes.get("dns_name"),
        target_group_arn=tg.id,
        listener_arn=listener.id,
    )
    scope.record_network()
    if not rcs.load_balancer.is_ready(lb) and lb.state is not None:
        scope.load_balancer.unready = lb.state
        scope.load_balancer.created = scope.created(before, lb)
        scope.load_balancer.created_at = lb.created_at


def wait_for_load_balancer(scope: ClusterScope) -> None:
    """Poll the load balancer alone while it provisions (after a tenth of its age, at most every 15 s);
    one that is gone is created again."""
    status = scope.network.load_balancer
    assert status is not None
    pending = scope.load_balancer
    rc = scope.resources.load_balancer
    if pending.to_poll is not None:
        # The state and DNS name are what the wait needs: the tags are the ones last seen (no DescribeTags).
        observed = rc.poll(pending.to_poll)
        if observed is not None:
            scope.reads(rc).learn_state(observed)
        if observed is None:
            _log.warning("the provisioning load balancer is gone; creating it again", arn=pending.to_poll)
            _ensure_load_balancer(scope, status.name or "")
        else:
            dns_name = observed.attributes.get("dns_name") or status.dns_name
            scope.network.load_balancer = status.model_copy(update={"dns_name": dns_name})
            if not rc.is_ready(observed) and observed.state is not None:
                pending.unready = observed.state
                pending.created_at = observed.created_at
    if pending.unready is not None:
        assert scope.network.load_balancer is not None
        raise Waiting(
            f"load balancer {scope.network.load_balancer.name} is {pending.unready}",
            LOAD_BALANCER_AVAILABLE.requeue(pending.created, pending.created_at),
        )


def mark_ready(scope: ClusterScope) -> None:
    """The control-plane endpoint, when the spec sets none, is the API server's name (``apiServerDNS``) or
    else the load balancer's DNS name; then the network as this pass knows it, and ready."""
    status = scope.network.load_balancer
    assert status is not None
    endpoint = scope.obj.spec.control_plane_endpoint
    dns = scope.obj.spec.api_server_dns
    if dns is not None and scope.engine_scope.recorder.recorded(RECORD_ROLE) is None:
        raise Waiting(f"the API server's name {dns.name} has no record yet", 5.0)
    if not endpoint.is_set and status.dns_name:
        host = dns.name.rstrip(".") if dns is not None else status.dns_name

        def set_endpoint(o: AWSCluster) -> None:
            o.spec.control_plane_endpoint = APIEndpoint(host=host, port=API_SERVER_PORT)

        scope.update_spec(set_endpoint)
    scope.record_network()
    scope.mark_ready()


DELETION = (
    Deletion("DeleteListener", lambda r: r.listener, roles("apiserver-listener")),
    Deletion("DeleteLoadBalancer", lambda r: r.load_balancer, roles("apiserver-lb")),
    Deletion("DeleteTargetGroup", lambda r: r.target_group, roles("apiserver-tg")),
)
