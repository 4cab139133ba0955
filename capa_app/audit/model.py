"""The audit's vocabulary: what discovery found, how each find is classified, what deleting it did.

:class:`Found` is discovery's internal record of one AWS resource, a plain dataclass. Everything that
crosses the CLI boundary (``capa audit -o json``) is a pydantic model: :class:`AuditRow` (one classified
resource, with the reason it was classified so), :class:`AuditReport`, the :class:`DeletionPlan` and the
:class:`DeletionReport`.

The classes, and which of them are *leaks* (what makes ``capa audit`` exit 3):

==========================  ==============================================================  =====
class                       meaning                                                         leak
==========================  ==============================================================  =====
managed                     recorded in an AWSCluster/AWSMachine status                     no
orphan (cluster gone)       carries this store's tag and the owned tag of a cluster no      yes
                            object of this store exists for
orphan (unrecorded)         the cluster exists, but no object records this resource         yes
foreign (other store)       carries a cluster's owned tag and another capa-py store's tag   no
foreign (no capa-py store)  carries a cluster's owned tag and no capa-py store tag (CAPA's,  no
                            made by hand, or by a capa-py version without store tags)
pending intent              matches an intent record: a reconcile may still adopt it        no
untagged in managed VPC     no owned tag, but inside a VPC a cluster owns                   yes
missing                     recorded in a status, but AWS does not know it (drift)          no
==========================  ==============================================================  =====

Foreign resources are listed only for clusters this store manages (a name clash) or named with
``--cluster``; they are deleted only when asked with ``--cluster NAME --include-foreign``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from capa_py.engine.tags import owning_cluster

GLOBAL_REGION = "global"
"""The region column of global resources (IAM)."""


class AuditClass(StrEnum):
    MANAGED = "managed"
    ORPHAN_CLUSTER_GONE = "orphan (cluster gone)"
    ORPHAN_UNRECORDED = "orphan (unrecorded)"
    PENDING_INTENT = "pending intent"
    UNTAGGED_IN_MANAGED_VPC = "untagged in managed VPC"
    MISSING = "missing"
    FOREIGN_STORE = "foreign (other store)"
    FOREIGN_NO_STORE = "foreign (no capa-py store)"


ORPHAN_CLASSES = frozenset({AuditClass.ORPHAN_CLUSTER_GONE, AuditClass.ORPHAN_UNRECORDED})
FOREIGN_CLASSES = frozenset({AuditClass.FOREIGN_STORE, AuditClass.FOREIGN_NO_STORE})
LEAK_CLASSES = ORPHAN_CLASSES | {AuditClass.UNTAGGED_IN_MANAGED_VPC}


class DiscoveryMode(StrEnum):
    TAGGING_API = "tagging-api"
    DESCRIBE = "describe"


@dataclass
class Found:
    """One AWS resource as discovery saw it, before classification."""

    region: str
    kind: str
    id: str
    tags: dict[str, str] = field(default_factory=dict)
    state: str | None = None
    vpc_id: str | None = None
    created_at: datetime | None = None
    parent: str | None = None
    """The id of the resource this one is part of (a route's table, a listener's load balancer)."""
    name: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)

    @property
    def owner(self) -> str | None:
        """The cluster whose owned tag the resource carries."""
        return owning_cluster(self.tags)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class AuditRow(_Model):
    """One classified resource: what it is, whose it is, its class, and why."""

    region: str
    kind: str
    id: str
    name: str | None = None
    cluster: str | None = None
    classification: AuditClass = Field(alias="class")
    reason: str
    created_at: datetime | None = None
    age_seconds: int | None = None
    vpc_id: str | None = None
    parent: str | None = None
    state: str | None = None
    owner: str | None = None
    """The object that records it (``awscluster/demo``), for managed, missing and pending rows."""
    role: str | None = None
    store: str | None = None
    """The capa-py store uid in the resource's ``capa-py.io/store`` tag (None: none)."""
    tags: dict[str, str] = Field(default_factory=dict)
    attributes: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """What deletion needs to know (attachments, associations, references); not part of the output."""

    @property
    def leak(self) -> bool:
        return self.classification in LEAK_CLASSES

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.id}"


class AuditReport(_Model):
    discovery: DiscoveryMode
    regions: list[str]
    clusters: list[str] | None = None
    """The clusters audited; None: this store's (its clusters, and what carries its store tag)."""
    store_uid: str | None = None
    """The uid of the store audited (what ``capa-py.io/store`` names on its resources)."""
    older_than_seconds: float | None = None
    rows: list[AuditRow] = Field(default_factory=list)

    @property
    def leaks(self) -> list[AuditRow]:
        return [row for row in self.rows if row.leak]

    def summary(self) -> dict[str, int]:
        counts = {str(c): 0 for c in AuditClass}
        for row in self.rows:
            counts[str(row.classification)] += 1
        return counts


class PlannedDeletion(_Model):
    """One step of the deletion plan, in execution order."""

    order: int
    phase: str
    row: AuditRow
    with_parent: str | None = None
    """Set when deleting the parent removes this resource too (a route with its table): no call of its
    own."""


class SkippedLeak(_Model):
    row: AuditRow
    reason: str


class DeletionPlan(_Model):
    steps: list[PlannedDeletion] = Field(default_factory=list)
    skipped: list[SkippedLeak] = Field(default_factory=list)


class Outcome(StrEnum):
    DELETED = "deleted"
    ALREADY_GONE = "already gone"
    WITH_PARENT = "deleted with parent"
    SKIPPED = "skipped"
    FAILED = "failed"


class DeletionResult(_Model):
    region: str
    kind: str
    id: str
    cluster: str | None = None
    classification: AuditClass = Field(alias="class")
    outcome: Outcome
    detail: str = ""
    attempts: int = 0

    @property
    def removed(self) -> bool:
        return self.outcome in (Outcome.DELETED, Outcome.ALREADY_GONE, Outcome.WITH_PARENT)


class DeletionReport(_Model):
    results: list[DeletionResult] = Field(default_factory=list)

    @property
    def failed(self) -> list[DeletionResult]:
        return [r for r in self.results if r.outcome == Outcome.FAILED]

    @property
    def not_removed(self) -> list[DeletionResult]:
        return [r for r in self.results if not r.removed]

    @property
    def all_removed(self) -> bool:
        return not self.not_removed
