"""``spec.apiServerDNS`` (capa-py's own field): a private hosted zone for the cluster's VPC and a CNAME of the
API server's name to the control-plane load balancer, the endpoint's host then being that name; deleted
(the record set, then the zone) before the VPC. Against moto in server mode: the zone takes strategy class
3 there (moto ignores CallerReference), the record set class 5."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from capa_py.api.aws import APIServerDNSSpec, AWSCluster
from capa_py.api.cluster import APIEndpoint, Cluster
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.engine.tags import cluster_tag_key
from capa_py.operations import apply_objects
from capa_py.store.errors import Invalid
from tests.controllers.conftest import Harness

NAME = "api.demo.capa.internal"


def _with_dns(objects: list[KubeObject], **fields: Any) -> list[KubeObject]:
    kept = [o for o in objects if isinstance(o, Cluster | AWSCluster)]
    for o in kept:
        if isinstance(o, AWSCluster):
            o.spec.api_server_dns = APIServerDNSSpec.model_validate({"name": NAME, **fields})
    return kept


def _zones(harness: Harness) -> list[dict[str, Any]]:
    return list(harness.aws.client("route53").call("ListHostedZones")["HostedZones"])


def _records(harness: Harness, zone_id: str) -> dict[str, dict[str, Any]]:
    listed = harness.aws.client("route53").call("ListResourceRecordSets", HostedZoneId=zone_id)
    return {f"{r['Name']} {r['Type']}": r for r in listed["ResourceRecordSets"]}


def test_api_server_dns_converges_to_a_private_zone_and_a_cname_and_becomes_the_endpoint(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    stored = harness.apply(_with_dns(example(), ttl=30))
    assert harness.converge(stored).converged

    cluster = harness.store.get(AWSCluster, "demo", "default")
    lb = cluster.status.network.api_server_load_balancer
    assert lb is not None
    assert lb.dns_name
    assert cluster.spec.control_plane_endpoint == APIEndpoint(host=NAME, port=6443), (
        "the name is the endpoint"
    )
    (zone,) = _zones(harness)
    zone_id = zone["Id"].rsplit("/", 1)[-1]
    assert (zone["Name"], zone["Config"]["PrivateZone"]) == ("demo.capa.internal.", True)
    vpcs = harness.aws.client("route53").call("GetHostedZone", Id=zone_id)["VPCs"]
    assert [v["VPCId"] for v in vpcs] == [cluster.status.network.vpc_id], "associated with the cluster's VPC"
    tags = harness.aws.client("route53").call(
        "ListTagsForResource", ResourceType="hostedzone", ResourceId=zone_id
    )
    assert {t["Key"]: t["Value"] for t in tags["ResourceTagSet"]["Tags"]}[cluster_tag_key("demo")] == "owned"
    record = _records(harness, zone_id)[f"{NAME}. CNAME"]
    assert (record["TTL"], [r["Value"] for r in record["ResourceRecords"]]) == (30, [lb.dns_name])
    resources = cluster.status.resources
    assert (resources["apiserver-dns-zone"].id, resources["apiserver-dns-zone"].strategy) == (
        zone_id,
        "separate-tagging",
    )
    assert (resources["apiserver-dns-record"].id, resources["apiserver-dns-record"].strategy) == (
        f"{zone_id}|{NAME}.|CNAME",
        "untracked",
    )
    core = harness.store.get(Cluster, "demo", "default")
    assert core.spec.control_plane_endpoint.host == NAME

    with call_scope() as calls:
        assert harness.converge(stored).converged
    route53_calls = {op: n for op, n in calls.by_operation().items() if op.startswith("route53:")}
    assert "route53:CreateHostedZone" not in route53_calls
    assert "route53:ChangeResourceRecordSets" not in route53_calls, "a steady state changes nothing"

    with pytest.raises(Invalid, match=r"spec\.apiServerDNS\.name: immutable"):
        harness.apply(_with_dns(example(), name="api2.demo.capa.internal"))
    changed = harness.apply(_with_dns(example(), ttl=120))
    with call_scope() as calls:
        assert harness.converge(changed).converged
    assert calls.by_operation()["route53:ChangeResourceRecordSets"] == 1, "the TTL is changed in place"
    assert _records(harness, zone_id)[f"{NAME}. CNAME"]["TTL"] == 120
    assert len(_zones(harness)) == 1


def test_api_server_dns_is_deleted_record_first_and_before_the_vpc(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    stored = harness.apply(_with_dns(example()))
    assert harness.converge(stored).converged
    order: list[str] = []

    def note(model: Any, **_: Any) -> None:
        order.append(model.name)

    for service in ("route53", "ec2"):
        harness.aws.client(service).raw.meta.events.register(f"before-call.{service}", note)
    harness.store.delete(Cluster, "demo", "default")
    assert harness.converge(stored, goal="gone").converged

    assert _zones(harness) == []
    changes = [i for i, op in enumerate(order) if op == "ChangeResourceRecordSets"]
    assert changes, "the record set was deleted"
    assert changes[0] < order.index("DeleteHostedZone") < order.index("DeleteVpc"), order


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"name": "localhost"}, "spec.apiServerDNS.name"),
        (
            {"name": "api.demo.internal", "hostedZoneName": "other.internal"},
            "spec.apiServerDNS.hostedZoneName",
        ),
        ({"name": "Api_Server.demo.internal"}, "spec.apiServerDNS.name"),
    ],
)
def test_a_bad_api_server_dns_is_refused_naming_the_field_and_nothing_is_created(
    harness: Harness, example: Callable[[], list[KubeObject]], fields: dict[str, str], path: str
) -> None:

    objects = [o for o in example() if isinstance(o, Cluster | AWSCluster)]
    awscluster = next(o for o in objects if isinstance(o, AWSCluster))
    awscluster.spec.api_server_dns = APIServerDNSSpec.model_validate(fields)
    with pytest.raises(Invalid, match=path.replace(".", r"\.")):
        apply_objects(harness.store, objects)
    assert _zones(harness) == []
    assert (
        harness.aws.ec2.call(
            "DescribeVpcs", Filters=[{"Name": "tag-key", "Values": [cluster_tag_key("demo")]}]
        )["Vpcs"]
        == []
    )


def test_a_cluster_without_api_server_dns_costs_no_route53_call(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    stored = harness.apply([o for o in example() if isinstance(o, Cluster | AWSCluster)])
    with call_scope() as calls:
        assert harness.converge(stored).converged
        harness.store.delete(Cluster, "demo", "default")
        assert harness.converge(stored, goal="gone").converged
    assert not [op for op in calls.by_operation() if op.startswith("route53:")], calls.by_operation()
