"""Whether an object's owners exist, decided as Kubernetes' garbage collector decides it, inside the writing
transaction of the SQLite store.

An owner reference is resolved by its ``apiVersion`` and ``kind``, its ``name`` and its ``uid``: the kind must
be one the store serves (registered with the store, or a version a stored CustomResourceDefinition serves);
a namespaced owner is looked for in the dependent's namespace, a cluster-scoped one among cluster-scoped
objects. The owner is

* ``present`` when an object of that group, kind, name, namespace and uid exists (one marked for deletion
  too);
* ``absent`` when none does: deleted, never there, re-created under the same name (another uid), or in
  another namespace than its namespaced dependent;
* ``unresolvable`` when its kind is not served, or when a cluster-scoped object names an owner of a
  namespaced kind: the collector cannot tell, and leaves the dependent alone.

The store reads the objects table itself (no cache), so the answer is the one the transaction commits with.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from capa_py.api.registry import KindRegistry, UnknownKind

OwnerState = Literal["present", "absent", "unresolvable"]

_CRD_SCOPE = (
    "SELECT json_extract(o.doc, '$.spec.scope') FROM objects o, json_each(o.doc, '$.spec.versions') AS v "
    "WHERE o.api_version = 'apiextensions.k8s.io/v1' AND o.kind = 'CustomResourceDefinition' "
    "AND json_extract(o.doc, '$.spec.group') = ? AND json_extract(o.doc, '$.spec.names.kind') = ? "
    "AND json_extract(v.value, '$.name') = ? AND json_extract(v.value, '$.served')"
)


def group_of(api_version: str) -> str:
    """The API group of an ``apiVersion`` (empty for the core group's ``v1``)."""
    return api_version.rpartition("/")[0]


def served_scope(
    conn: sqlite3.Connection, registry: KindRegistry, api_version: str, kind: str
) -> bool | None:
    """Whether objects of ``api_version``/``kind`` are namespaced; None when the store does not serve it."""
    try:
        return registry.for_gvk(api_version, kind).NAMESPACED
    except UnknownKind:
        pass
    group, _, version = api_version.rpartition("/")
    if not group:
        return None
    row = conn.execute(_CRD_SCOPE, (group, kind, version)).fetchone()
    return None if row is None else row[0] != "Cluster"


def owner_state(
    conn: sqlite3.Connection,
    registry: KindRegistry,
    reference: dict[str, Any],
    dependent_namespace: str,
    gone: str | None = None,
) -> OwnerState:
    """What the owner ``reference`` of an object in ``dependent_namespace`` ("" when cluster-scoped) names;
    a reference to ``gone`` (the uid of an owner just removed) is absent whatever its kind."""
    uid = str(reference.get("uid", ""))
    if gone is not None and uid == gone:
        return "absent"
    api_version, kind = str(reference.get("apiVersion", "")), str(reference.get("kind", ""))
    namespaced = served_scope(conn, registry, api_version, kind)
    if namespaced is None or (namespaced and not dependent_namespace):
        return "unresolvable"
    found = "SELECT api_version, kind, namespace, name FROM objects WHERE uid=?"
    row = conn.execute(found, (uid,)).fetchone()
    if row is None:
        return "absent"
    found_version, found_kind, found_namespace, found_name = row
    same = (
        group_of(found_version) == group_of(api_version)
        and found_kind == kind
        and found_name == reference.get("name")
        and found_namespace == (dependent_namespace if namespaced else "")
    )
    return "present" if same else "absent"
