"""The one "release what holds it, then delete" routine (resources/deletion.py) the cluster delete's stray
sweep and ``capa audit --delete`` share, against moto: an attached gateway is detached, an associated table
disassociated, each then deleted; what is already gone says NotFound; and both callers delete kinds in its
one dependency order."""

from __future__ import annotations

import pytest

from capa_app.audit.plan import KIND_ORDER
from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import DependencyViolation, NotFound
from resources import RESOURCE_CLASSES
from resources.deletion import DELETION_ORDER, release_and_delete
from resources.internet_gateway import (
    InternetGateway,
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
)
from resources.route_table import RouteTable, RouteTableAssociation, RouteTableAssociationDesired
from tests.resources.builders import Builder


def test_an_attached_gateway_is_detached_then_deleted(build: Builder) -> None:
    vpc = build.vpc()
    gateways = InternetGateway(build.aws)
    gateway = build.internet_gateway()
    InternetGatewayAttachment(build.aws).create(
        InternetGatewayAttachmentDesired(gateway.id, vpc.id), None, None
    )
    attached = gateways.describe_by_id(gateway.id)
    assert attached is not None
    with pytest.raises(DependencyViolation):
        gateways.delete(gateway.id)  # what the routine is for

    with call_scope() as calls:
        release_and_delete(gateways, gateway.id, attached)

    assert gateways.describe_by_id(gateway.id) is None
    assert calls.by_operation() == {"ec2:DetachInternetGateway": 1, "ec2:DeleteInternetGateway": 1}


def test_without_an_observation_a_describe_shows_what_holds_it(build: Builder) -> None:
    vpc = build.vpc()
    gateways = InternetGateway(build.aws)
    gateway = build.internet_gateway()
    InternetGatewayAttachment(build.aws).create(
        InternetGatewayAttachmentDesired(gateway.id, vpc.id), None, None
    )

    release_and_delete(gateways, gateway.id, describe=True)

    assert gateways.describe_by_id(gateway.id) is None
    with pytest.raises(NotFound):
        release_and_delete(gateways, gateway.id, describe=True)


def test_an_associated_table_is_disassociated_then_deleted(build: Builder) -> None:
    vpc = build.vpc()
    subnet = build.subnet(vpc.id)
    tables = RouteTable(build.aws)
    table = build.route_table(vpc.id)
    RouteTableAssociation(build.aws).create(RouteTableAssociationDesired(table.id, subnet.id), None, None)
    associated = tables.describe_by_id(table.id)
    assert associated is not None
    assert [a for a in associated.attributes["associations"] if not a["main"]]

    release_and_delete(tables, table.id, associated)

    assert tables.describe_by_id(table.id) is None
    with pytest.raises(NotFound):
        release_and_delete(tables, table.id, associated)


def test_one_dependency_order_covers_every_resource_class_and_the_audit_follows_it() -> None:
    assert sorted(DELETION_ORDER) == sorted(rc.kind for rc in RESOURCE_CLASSES)
    audit_positions = [KIND_ORDER[kind][0] for kind in DELETION_ORDER]
    assert audit_positions == sorted(audit_positions)
