"""Engine outcomes that are not plain success, split by what the controller should do next.

``EngineError``
 ├─ ``RetryableError``     requeue with backoff: a status write or a tag failed, nothing is lost
 ├─ ``Waiting``            AWS is still working (a NAT gateway pending, a delete in progress): requeue after
 └─ ``NonRetryableError``  stop and report: retrying cannot help, or a resource may be orphaned
     ├─ ``RollbackFailed``     created, could not be recorded, and could not be deleted: orphan logged
     ├─ ``UndecidableIntent``  an interrupted create left several candidates; a human must decide
     ├─ ``NaturalKeyTaken``    the name/key is held by a resource this cluster does not own
     ├─ ``AdoptionRefused``    a found, unrecorded resource differs from the spec in an immutable attribute
     └─ ``ClusterOwnedElsewhere``  the cluster's name is taken in this account by another store (or by
                                   something that is not capa-py): never adopted, never deleted
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capa_py.engine.resource import Mismatch


class EngineError(Exception):
    """Base of every engine outcome that is not plain success."""


class RetryableError(EngineError):
    """Requeue with backoff: a status write or a tag failed, and nothing is lost."""


class Waiting(EngineError):
    def __init__(self, message: str, requeue_after: float = 5.0) -> None:
        self.requeue_after = requeue_after
        super().__init__(message)


class NonRetryableError(EngineError):
    reason = "NonRetryable"


class RollbackFailed(NonRetryableError):
    reason = "RollbackFailed"

    def __init__(self, message: str, resource_id: str, kind: str) -> None:
        self.resource_id = resource_id
        self.kind = kind
        super().__init__(message)


class UndecidableIntent(NonRetryableError):
    reason = "UndecidableIntent"

    def __init__(self, message: str, candidates: list[str]) -> None:
        self.candidates = candidates
        super().__init__(message)


class NaturalKeyTaken(NonRetryableError):
    reason = "NaturalKeyTaken"


class AdoptionRefused(NonRetryableError):
    """A resource found by its tags, its natural key or an intent is not what the spec asks for: an
    immutable attribute differs. Nothing is tagged, modified, recorded or deleted."""

    reason = "AdoptionRefused"

    def __init__(self, kind: str, resource_id: str, how: str, mismatches: Sequence[Mismatch]) -> None:
        self.kind = kind
        self.resource_id = resource_id
        self.how = how
        self.mismatches = list(mismatches)
        found = ", ".join(f"{m.attribute} {m.found}" for m in self.mismatches)
        wanted = ", ".join(f"{m.attribute} {m.wanted}" for m in self.mismatches)
        super().__init__(
            f"{kind} {resource_id} {how} has {found}; the spec asks for {wanted}. It is not adopted: "
            "remove or retag it, or change the spec"
        )


class ClusterOwnedElsewhere(NonRetryableError):
    """A resource carries this cluster's owned tag but another store's tag (or no capa-py store tag)."""

    reason = "ClusterOwnedElsewhere"

    def __init__(self, cluster: str, kind: str, resource_id: str, other_store: str) -> None:
        self.cluster = cluster
        self.kind = kind
        self.resource_id = resource_id
        self.other_store = other_store
        holder = f"capa-py store {other_store}" if other_store else "something that is not a capa-py store"
        super().__init__(
            f"cluster {cluster}'s {kind} {resource_id} in this account belongs to {holder}; "
            "use another cluster name or delete it there"
        )


class RecordError(EngineError):
    """Writing the owning object's status failed (the recorder raises this)."""
