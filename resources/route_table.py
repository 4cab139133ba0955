"""Route tables (``CreateRouteTable``) and their subnet associations (``AssociateRouteTable``); their routes
(``CreateRoute``) are in :mod:`resources.route`.

Routes and associations cannot be tagged and take no token, but both have natural keys that AWS itself
enforces: a route table has one route per destination (``RouteAlreadyExists`` otherwise), and a subnet has
exactly one route table association. So they are found by key before being created, and their one mutable
attribute — where the route points, which table the subnet uses — is changed in place (``ReplaceRoute``,
``ReplaceRouteTableAssociation``) rather than by delete and re-create, which would cut traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.tags import owning_cluster
from capa_py.engine.traits import Traits
from resources._common import (
    carries,
    client_token_param,
    ec2_by_filter,
    ec2_create_tags,
    ec2_items,
    tag_specifications,
)

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:AssociateRouteTable",
    "ec2:CreateRouteTable",
    "ec2:DeleteRouteTable",
    "ec2:DescribeRouteTables",
    "ec2:DisassociateRouteTable",
    "ec2:ReplaceRouteTableAssociation",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

# Route target id prefix → the CreateRoute/ReplaceRoute parameter naming it, and the route member that
# reports it in DescribeRouteTables.
_TARGET_PARAMETERS = {
    "igw-": "GatewayId",
    "vgw-": "GatewayId",
    "nat-": "NatGatewayId",
    "eigw-": "EgressOnlyInternetGatewayId",
    "eni-": "NetworkInterfaceId",
    "pcx-": "VpcPeeringConnectionId",
    "tgw-": "TransitGatewayId",
    "i-": "InstanceId",
}
_TARGET_MEMBERS = (
    "GatewayId",
    "NatGatewayId",
    "EgressOnlyInternetGatewayId",
    "NetworkInterfaceId",
    "VpcPeeringConnectionId",
    "TransitGatewayId",
    "InstanceId",
)


def target_parameter(target_id: str) -> str:
    """The CreateRoute parameter for a target id (``igw-…`` → ``GatewayId``, ``nat-…`` → ``NatGatewayId``)."""
    for prefix, parameter in _TARGET_PARAMETERS.items():
        if target_id.startswith(prefix):
            return parameter
    raise ValueError(
        f"unsupported route target {target_id!r}: expected one of {', '.join(_TARGET_PARAMETERS)}"
    )


def route_target(route: Mapping[str, Any]) -> str | None:
    for member in _TARGET_MEMBERS:
        if route.get(member):
            return str(route[member])
    return None


# -- route tables --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteTableDesired:
    vpc_id: str


def _observed_table(table: Mapping[str, Any]) -> Observed:
    associations = [
        {
            "id": a.get("RouteTableAssociationId"),
            "subnet_id": a.get("SubnetId"),
            "main": bool(a.get("Main")),
        }
        for a in table.get("Associations", [])
    ]
    routes = [
        {
            "destination": r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock"),
            "target_id": route_target(r),
            "state": r.get("State"),
        }
        for r in table.get("Routes", [])
    ]
    return Observed(
        id=table["RouteTableId"],
        tags=tag_dict(table.get("Tags")),
        state="available",
        attributes={
            "vpc_id": table.get("VpcId"),
            "main": any(a["main"] for a in associations),
            "associations": associations,
            "routes": routes,
        },
    )


class RouteTable(ResourceClass[RouteTableDesired]):
    """A route table. ``delete`` of an id that does not exist raises :class:`~capa_py.aws.errors.NotFound`
    (``InvalidRouteTableID.NotFound``); of a table still associated with a subnet,
    :class:`~capa_py.aws.errors.DependencyViolation`."""

    kind = "route-table"
    service = "ec2"
    create_operation = "CreateRouteTable"
    traits = Traits(tag_on_create=True, client_token=True, taggable=True)
    """CreateRouteTable accepts TagSpecifications (tag_on_create) and ClientToken (client_token); CreateTags
    tags it later (taggable)."""

    def parent_of(self, desired: RouteTableDesired) -> str | None:
        return desired.vpc_id

    def create(
        self, desired: RouteTableDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "CreateRouteTable",
            after_create=True,  # the VPC may be moments old
            VpcId=desired.vpc_id,
            **tag_specifications("route-table", tags),
            **client_token_param(token),
        )
        return _observed_table(response["RouteTable"])

    def describe_by_id(self, resource_id: str) -> Observed | None:
        tables = ec2_items(self.aws.ec2, "DescribeRouteTables", "RouteTables", RouteTableIds=[resource_id])
        return _observed_table(tables[0]) if tables else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        tables = ec2_by_filter(
            self.aws.ec2, "DescribeRouteTables", "RouteTables", "route-table-id", resource_ids
        )
        return {o.id: o for o in map(_observed_table, tables) if o.id in resource_ids}

    def describe_by_tags(self, tags: Mapping[str, str], desired: RouteTableDesired | None) -> list[Observed]:
        tables = ec2_items(self.aws.ec2, "DescribeRouteTables", "RouteTables", Filters=tag_filters(tags))
        return [o for o in map(_observed_table, tables) if carries(o.tags, tags)]

    def describe_candidates(self, desired: RouteTableDesired) -> list[Observed]:
        """Route tables in the desired VPC that are not its main table and that no cluster owns."""
        filters = [{"Name": "vpc-id", "Values": [desired.vpc_id]}]
        tables = ec2_items(self.aws.ec2, "DescribeRouteTables", "RouteTables", Filters=filters)
        return [
            o
            for o in map(_observed_table, tables)
            if not o.attributes["main"] and owning_cluster(o.tags) is None
        ]

    def mismatches(self, observed: Observed, desired: RouteTableDesired) -> list[Mismatch]:
        return compare({"vpcId": (desired.vpc_id, observed.attributes.get("vpc_id"))})

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("DeleteRouteTable", RouteTableId=resource_id)

    def key_of(self, desired: RouteTableDesired) -> str:
        return f"route-table in {desired.vpc_id}"

    def fingerprint(self, desired: RouteTableDesired) -> dict[str, str]:
        return {"vpc_id": desired.vpc_id}


# -- associations --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteTableAssociationDesired:
    route_table_id: str
    subnet_id: str


class RouteTableAssociation(ResourceClass[RouteTableAssociationDesired]):
    """The association of a subnet with a route table, by association id (``rtbassoc-…``).

    A subnet has exactly one association, so the subnet is the natural key. :meth:`update` re-points the
    subnet to the desired table with ``ReplaceRouteTableAssociation``, which gives the association a *new*
    id: it is written back into ``observed.id`` (and ``observed.attributes``), so the caller must record
    ``observed.id`` again after an update that returned True. ``delete`` (``DisassociateRouteTable``) of an
    id that does not exist raises :class:`~capa_py.aws.errors.NotFound` (``InvalidAssociationID.NotFound``).
    """

    kind = "route-table-association"
    reads_within = RouteTable.kind
    service = "ec2"
    create_operation = "AssociateRouteTable"
    traits = Traits(natural_key=True)
    """AssociateRouteTable has no TagSpecifications and no ClientToken, and an association cannot be tagged;
    a subnet has one association, so the subnet finds it (natural_key)."""
    tracks_updates = True

    def parent_of(self, desired: RouteTableAssociationDesired) -> str | None:
        return desired.subnet_id

    def create(
        self, desired: RouteTableAssociationDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "AssociateRouteTable",
            after_create=True,  # the table and the subnet may be moments old
            RouteTableId=desired.route_table_id,
            SubnetId=desired.subnet_id,
        )
        state = response.get("AssociationState", {}).get("State", "associated")
        return self._observed(response["AssociationId"], desired.route_table_id, desired.subnet_id, state)

    def describe_by_id(self, resource_id: str) -> Observed | None:
        filters = [{"Name": "association.route-table-association-id", "Values": [resource_id]}]
        return self._find(filters, lambda a: a.get("RouteTableAssociationId") == resource_id)

    def describe_by_key(self, desired: RouteTableAssociationDesired) -> Observed | None:
        filters = [{"Name": "association.subnet-id", "Values": [desired.subnet_id]}]
        return self._find(filters, lambda a: a.get("SubnetId") == desired.subnet_id)

    def update(self, observed: Observed, desired: RouteTableAssociationDesired) -> bool:
        if observed.attributes.get("route_table_id") == desired.route_table_id:
            return False
        response = self.aws.ec2.call(
            "ReplaceRouteTableAssociation",
            after_create=True,
            AssociationId=observed.id,
            RouteTableId=desired.route_table_id,
        )
        observed.id = response["NewAssociationId"]
        observed.state = response.get("AssociationState", {}).get("State", observed.state)
        observed.attributes = {**observed.attributes, "route_table_id": desired.route_table_id}
        return True

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("DisassociateRouteTable", AssociationId=resource_id)

    def mismatches(self, observed: Observed, desired: RouteTableAssociationDesired) -> list[Mismatch]:
        return compare({"subnetId": (desired.subnet_id, observed.attributes.get("subnet_id"))})

    def key_of(self, desired: RouteTableAssociationDesired) -> str:
        return f"subnet {desired.subnet_id}"

    def fingerprint(self, desired: RouteTableAssociationDesired) -> dict[str, str]:
        return {"route_table_id": desired.route_table_id, "subnet_id": desired.subnet_id}

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        """Associations found in route tables observed moments ago (``within``) are read from that
        observation; the others are described, all in one call."""
        wanted = set(resource_ids)
        found: dict[str, Observed] = {}
        for table in within:
            for association in table.attributes["associations"]:
                if association["id"] in wanted and not association["main"] and association["subnet_id"]:
                    found[association["id"]] = self._observed(
                        association["id"], table.id, association["subnet_id"], "associated"
                    )
        missing = sorted(wanted - found.keys())
        if missing:
            tables = ec2_by_filter(
                self.aws.ec2,
                "DescribeRouteTables",
                "RouteTables",
                "association.route-table-association-id",
                missing,
            )
            found.update(
                {
                    o.id: o
                    for o in self._in_tables(tables, lambda a: a.get("RouteTableAssociationId") in wanted)
                }
            )
        return found

    def _find(
        self, filters: list[dict[str, Any]], matches: Callable[[Mapping[str, Any]], bool]
    ) -> Observed | None:
        found = self._all(filters, matches)
        return found[0] if found else None

    def _all(
        self, filters: list[dict[str, Any]], matches: Callable[[Mapping[str, Any]], bool]
    ) -> list[Observed]:
        tables = ec2_items(self.aws.ec2, "DescribeRouteTables", "RouteTables", Filters=filters)
        return self._in_tables(tables, matches)

    def _in_tables(
        self, tables: list[dict[str, Any]], matches: Callable[[Mapping[str, Any]], bool]
    ) -> list[Observed]:
        found: list[Observed] = []
        for table in tables:
            for association in table.get("Associations", []):
                if association.get("Main") or not matches(association):
                    continue
                state = association.get("AssociationState", {}).get("State", "associated")
                if state in ("disassociating", "disassociated", "failed"):
                    continue
                found.append(
                    self._observed(
                        association["RouteTableAssociationId"],
                        table["RouteTableId"],
                        association["SubnetId"],
                        state,
                    )
                )
        return found

    @staticmethod
    def _observed(association_id: str, table_id: str, subnet_id: str, state: str) -> Observed:
        return Observed(
            id=association_id, state=state, attributes={"route_table_id": table_id, "subnet_id": subnet_id}
        )
