"""The resources the objects record, checked live: does each exist in AWS, and does it carry its managed
tags? (The records themselves: :mod:`capa_py.inventory`.)"""

from __future__ import annotations

from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine
from capa_py.engine.tags import lookup_tags
from capa_py.inventory import RecordedRow
from resources import resource_class


def verify_tags(rows: list[RecordedRow], pool: ClientPool, engine: Engine) -> None:
    """Ask AWS about each recorded resource: does it exist, and does it carry its managed tags?"""
    for row in rows:
        rc = resource_class(row.kind)(pool.for_region(row.region or None))
        observed = rc.describe_by_id(row.id)
        if observed is None:
            row.state = "missing"
            row.tags_complete = None
            continue
        row.state = observed.state or "present"
        traits = engine.traits(rc)
        if not (traits.taggable or traits.tag_on_create):
            row.tags_complete = None
            continue
        wanted = {**lookup_tags(row.cluster, row.role), **(row.additional_tags or {})}
        row.tags_complete = all(observed.tags.get(k) == v for k, v in wanted.items())
