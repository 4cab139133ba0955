"""Routes (``CreateRoute``), id ``rtb-…|0.0.0.0/0``.

A route cannot be tagged and takes no token, but a route table has one route per destination
(``RouteAlreadyExists`` otherwise), so (route table, destination) is a natural key AWS itself enforces; where
a route points is changed in place (``ReplaceRoute``) rather than by delete and re-create, which would cut
traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare
from capa_py.engine.traits import Traits
from resources._common import (
    ec2_by_filter,
    ec2_items,
    split_id,
)
from resources.route_table import RouteTable, route_target, target_parameter

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateRoute",
    "ec2:DeleteRoute",
    "ec2:DescribeRouteTables",
    "ec2:ReplaceRoute",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


@dataclass(frozen=True)
class RouteDesired:
    route_table_id: str
    destination_cidr_block: str
    target_id: str
    """An internet gateway (``igw-…``) or NAT gateway (``nat-…``) id; other route targets work too."""


def route_id(route_table_id: str, destination_cidr_block: str) -> str:
    return f"{route_table_id}|{destination_cidr_block}"


class Route(ResourceClass[RouteDesired]):
    """A route, id ``rtb-…|0.0.0.0/0``. Creating a destination the table already routes raises
    :class:`~capa_py.aws.errors.AlreadyExists` (``RouteAlreadyExists``); ``delete`` of a route that does not
    exist raises :class:`~capa_py.aws.errors.NotFound` (``InvalidRoute.NotFound``, or
    ``InvalidRouteTableID.NotFound`` when the table is gone). A route whose target was deleted is reported
    with state ``blackhole``; :meth:`update` re-points it."""

    kind = "route"
    reads_within = RouteTable.kind
    service = "ec2"
    create_operation = "CreateRoute"
    traits = Traits(natural_key=True)
    """CreateRoute has no TagSpecifications and no ClientToken, and a route cannot be tagged; a table has one
    route per destination, so (route table, destination) finds it (natural_key)."""
    tracks_updates = True

    def parent_of(self, desired: RouteDesired) -> str | None:
        return desired.route_table_id

    def create(self, desired: RouteDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        self.aws.ec2.call(
            "CreateRoute",
            after_create=True,  # the table and the target may be moments old
            RouteTableId=desired.route_table_id,
            DestinationCidrBlock=desired.destination_cidr_block,
            **{target_parameter(desired.target_id): desired.target_id},
        )
        return self._observed(
            desired.route_table_id, desired.destination_cidr_block, desired.target_id, "active"
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        table_id, destination = split_id(resource_id, "|", self.kind)
        return self._lookup(table_id, destination)

    def describe_by_key(self, desired: RouteDesired) -> Observed | None:
        return self._lookup(desired.route_table_id, desired.destination_cidr_block)

    def update(self, observed: Observed, desired: RouteDesired) -> bool:
        if observed.attributes.get("target_id") == desired.target_id and observed.state != "blackhole":
            return False
        self.aws.ec2.call(
            "ReplaceRoute",
            after_create=True,
            RouteTableId=desired.route_table_id,
            DestinationCidrBlock=desired.destination_cidr_block,
            **{target_parameter(desired.target_id): desired.target_id},
        )
        observed.attributes = {**observed.attributes, "target_id": desired.target_id}
        observed.state = "active"
        return True

    def delete(self, resource_id: str) -> None:
        table_id, destination = split_id(resource_id, "|", self.kind)
        self.aws.ec2.call("DeleteRoute", RouteTableId=table_id, DestinationCidrBlock=destination)

    def mismatches(self, observed: Observed, desired: RouteDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "routeTableId": (desired.route_table_id, found.get("route_table_id")),
                "destinationCidrBlock": (desired.destination_cidr_block, found.get("destination_cidr_block")),
            }
        )

    def key_of(self, desired: RouteDesired) -> str:
        return route_id(desired.route_table_id, desired.destination_cidr_block)

    def fingerprint(self, desired: RouteDesired) -> dict[str, str]:
        return {
            "route_table_id": desired.route_table_id,
            "destination_cidr_block": desired.destination_cidr_block,
            "target_id": desired.target_id,
        }

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        """Routes of tables observed moments ago (``within``) are read from that observation (the same
        DescribeRouteTables answer); the other tables are described, all in one call."""
        wanted = {tuple(split_id(rid, "|", self.kind)) for rid in resource_ids}
        table_ids = {t for t, _ in wanted}
        found: dict[str, Observed] = {}
        for table_observed in sorted((o for o in within if o.id in table_ids), key=lambda o: o.id):
            table_id = table_observed.id
            for route in table_observed.attributes["routes"]:
                key = (table_id, route["destination"])
                if key in wanted:
                    observed = self._observed(table_id, str(key[1]), route["target_id"], route["state"])
                    found[observed.id] = observed
        missing = {t for t, d in wanted if route_id(t, d) not in found}
        tables = ec2_by_filter(self.aws.ec2, "DescribeRouteTables", "RouteTables", "route-table-id", missing)
        for table in tables:
            for route in table.get("Routes", []):
                key = (table["RouteTableId"], route.get("DestinationCidrBlock"))
                if key in wanted:
                    observed = self._observed(key[0], str(key[1]), route_target(route), route.get("State"))
                    found[observed.id] = observed
        return found

    def _lookup(self, table_id: str, destination: str) -> Observed | None:
        tables = ec2_items(self.aws.ec2, "DescribeRouteTables", "RouteTables", RouteTableIds=[table_id])
        for table in tables:
            for route in table.get("Routes", []):
                if route.get("DestinationCidrBlock") == destination:
                    return self._observed(table_id, destination, route_target(route), route.get("State"))
        return None

    @staticmethod
    def _observed(table_id: str, destination: str, target_id: str | None, state: str | None) -> Observed:
        return Observed(
            id=route_id(table_id, destination),
            state=state,
            attributes={
                "route_table_id": table_id,
                "destination_cidr_block": destination,
                "target_id": target_id,
            },
        )
