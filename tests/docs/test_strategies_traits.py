"""The trait table of docs/strategies.md is the code's: a resource class that changes its traits changes the
docs."""

from __future__ import annotations

import re
from pathlib import Path

from capa_py.engine.profiles import AWS, MOTO
from resources import RESOURCE_CLASSES

NO = "\N{EN DASH}"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "strategies.md"


def _table_rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in PAGE.read_text().splitlines():
        match = re.match(r"^\| `([a-z-]+)` \| `([a-z0-9]+:[A-Za-z]+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [match.group(2), *(cell.strip() for cell in match.group(3).split("|"))]
    return rows


def test_trait_table_matches_every_resource_class() -> None:
    rows = _table_rows()
    assert set(rows) == {cls.kind for cls in RESOURCE_CLASSES}, "trait table rows != resource classes"
    for cls in RESOURCE_CLASSES:
        traits = cls.traits
        flags = (traits.tag_on_create, traits.client_token, traits.natural_key, traits.taggable)
        expected = [
            f"{cls.service}:{cls.create_operation}",
            *("yes" if flag else NO for flag in flags),
            str(int(AWS.effective(cls.kind, traits).strategy)),
            str(int(MOTO.effective(cls.kind, traits).strategy)),
        ]
        assert rows[cls.kind] == expected, f"trait table row for {cls.kind} is stale"
