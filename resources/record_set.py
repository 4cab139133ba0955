"""A Route 53 record set (``ChangeResourceRecordSets`` with ``UPSERT``), id ``Z…|name.|TYPE``.

A record set cannot be tagged and its change takes no token, but a zone holds one record set per name and
type, so (zone, name, type) is a natural key Route 53 itself enforces: strategy class 5, made safe by
looking the key up before every create. ``UPSERT`` makes a create that races another process's (or repeats
one whose answer was lost) converge on the same record instead of failing; :meth:`RecordSet.update` changes
the values or TTL in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.traits import Traits
from resources._common import split_id
from resources.hosted_zone import fqdn

IAM_ACTIONS: tuple[str, ...] = (
    "route53:ChangeResourceRecordSets",
    "route53:ListResourceRecordSets",
)


@dataclass(frozen=True)
class RecordSetDesired:
    zone_id: str
    name: str
    values: tuple[str, ...]
    type: str = "CNAME"
    ttl: int = 300


def record_set_id(zone_id: str, name: str, record_type: str) -> str:
    return f"{zone_id}|{fqdn(name)}|{record_type}"


def _values(record: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(r["Value"] for r in record.get("ResourceRecords", [])))


def _observed(zone_id: str, record: Mapping[str, Any]) -> Observed:
    return Observed(
        id=record_set_id(zone_id, record["Name"], record["Type"]),
        attributes={"values": _values(record), "ttl": record.get("TTL")},
    )


class RecordSet(ResourceClass[RecordSetDesired]):
    """A record set of one name and type. ``delete`` of one that does not exist (or whose zone is gone)
    raises :class:`~capa_py.aws.errors.NotFound`."""

    kind = "record-set"
    service = "route53"
    create_operation = "ChangeResourceRecordSets"
    traits = Traits(natural_key=True)
    """ChangeResourceRecordSets takes no Tags and no token, and a record set cannot be tagged; a zone holds
    one record set per name and type, so (zone, name, type) finds it (natural_key)."""
    tracks_updates = True

    @property
    def _route53(self) -> AWSClient:
        return self.aws.client("route53")

    def parent_of(self, desired: RecordSetDesired) -> str | None:
        return desired.zone_id

    def _change(
        self, action: str, zone_id: str, name: str, record_type: str, ttl: int | None, values: tuple[str, ...]
    ) -> None:
        record: dict[str, Any] = {
            "Name": fqdn(name),
            "Type": record_type,
            "ResourceRecords": [{"Value": v} for v in values],
        }
        if ttl is not None:
            record["TTL"] = ttl
        params = {
            "HostedZoneId": zone_id,
            "ChangeBatch": {"Changes": [{"Action": action, "ResourceRecordSet": record}]},
        }
        # UPSERT of the same values is idempotent: a repeat after an unknown outcome changes nothing.
        self._route53.call_with("ChangeResourceRecordSets", params, repeat_safe=action == "UPSERT")

    def create(
        self, desired: RecordSetDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        values = tuple(sorted(desired.values))
        self._change("UPSERT", desired.zone_id, desired.name, desired.type, desired.ttl, values)
        return Observed(
            id=record_set_id(desired.zone_id, desired.name, desired.type),
            attributes={"values": values, "ttl": desired.ttl},
        )

    def _find(self, zone_id: str, name: str, record_type: str) -> Mapping[str, Any] | None:
        try:
            response = self._route53.call(
                "ListResourceRecordSets",
                HostedZoneId=zone_id,
                StartRecordName=fqdn(name),
                StartRecordType=record_type,
                MaxItems="1",
            )
        except NotFound:
            return None
        for record in response.get("ResourceRecordSets", []):
            if fqdn(record["Name"]) == fqdn(name) and record["Type"] == record_type:
                return record  # type: ignore[no-any-return]
        return None

    def describe_by_id(self, resource_id: str) -> Observed | None:
        zone_id, name, record_type = split_id(resource_id, "|", self.kind, parts=3)
        record = self._find(zone_id, name, record_type)
        return _observed(zone_id, record) if record is not None else None

    def describe_by_key(self, desired: RecordSetDesired) -> Observed | None:
        return self.describe_by_id(record_set_id(desired.zone_id, desired.name, desired.type))

    def update(self, observed: Observed, desired: RecordSetDesired) -> bool:
        values = tuple(sorted(desired.values))
        if observed.attributes.get("values") == values and observed.attributes.get("ttl") == desired.ttl:
            return False
        self._change("UPSERT", desired.zone_id, desired.name, desired.type, desired.ttl, values)
        observed.attributes.update(values=values, ttl=desired.ttl)
        return True

    def delete(self, resource_id: str) -> None:
        zone_id, name, record_type = split_id(resource_id, "|", self.kind, parts=3)
        record = self._find(zone_id, name, record_type)
        if record is None:
            raise NotFound(
                f"route53:ChangeResourceRecordSets: record set {resource_id} does not exist",
                self.service,
                "ChangeResourceRecordSets",
                "InvalidChangeBatch",
            )
        # DELETE must name the record set exactly as it is.
        self._change("DELETE", zone_id, name, record_type, record.get("TTL"), _values(record))

    def key_of(self, desired: RecordSetDesired) -> str:
        return f"{desired.type} record {fqdn(desired.name)} in zone {desired.zone_id}"

    def fingerprint(self, desired: RecordSetDesired) -> dict[str, str]:
        return {"zone_id": desired.zone_id, "name": fqdn(desired.name), "type": desired.type}
