"""Store errors, split by what the caller should do, mirroring the Kubernetes API status reasons.

``StoreError``
 ├─ ``NotFound``       the object does not exist (404); ``about`` names it where the store knows which
 ├─ ``AlreadyExists``  create of a name that is taken (409)
 ├─ ``Conflict``       the write was based on a stale ``resourceVersion``: re-read and retry (409)
 ├─ ``Invalid``        the object fails validation; ``field`` names the path (422)
 ├─ ``Expired``        a watch asked for a ``resourceVersion`` that was compacted away: re-list (410)
 ├─ ``Unreadable``   a stored object this version cannot read (written by a newer capa-py)
 └─ ``Unavailable``    the store cannot be opened or reached: the path is not a database, the API server
     │                 does not answer (or answers 5xx, 429, 401/403)
     ├─ ``Missing``    (opened without creating) nothing is there yet
     ├─ ``Newer``      the file was written by a newer capa-py, in a layout this version does not know
     ├─ ``ReadOnly``   the file cannot be written (opened for reading only): writes are refused
     ├─ ``WriteFailed`` the disk is full or failing: the write was rolled back
     └─ ``Damaged``    the file is corrupt: ``sqlite3 FILE .recover`` rescues what it holds
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class StoreError(Exception):
    """Base of every object store error."""

    status = 500


@dataclass(frozen=True)
class ObjectRef:
    """Which object an error is about: its kind, namespace (empty for cluster-scoped kinds) and name."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, kind: str, name: str, namespace: str | None = None) -> ObjectRef:
        return cls(kind, namespace or "", name)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class NotFound(StoreError):
    """The object does not exist. ``about`` is the object a store looked for and did not find (None when
    the store cannot tell, such as a create refused because of something else missing): a caller asking
    whether *its* object is gone compares ``about``, never the message."""

    status = 404

    def __init__(self, message: str, about: ObjectRef | None = None) -> None:
        self.about = about
        super().__init__(message)

    @classmethod
    def missing(cls, about: ObjectRef) -> NotFound:
        """``<Kind> <namespace>/<name> not found``, about that object."""
        return cls(f"{about} not found", about)

    def __reduce__(self) -> tuple[type[NotFound], tuple[str, ObjectRef | None]]:
        return type(self), (str(self), self.about)


class AlreadyExists(StoreError):
    status = 409


class Conflict(StoreError):
    """The object was modified since it was read; re-read it and apply the change again."""

    status = 409


class Invalid(StoreError):
    status = 422

    def __init__(self, message: str, field: str = "", causes: Sequence[tuple[str, str]] = ()) -> None:
        """``causes``: every ``(field, message)`` an API server reported; ``field`` is the first one's."""
        self.field = field
        self.causes = tuple(causes) or ((field, message),)
        super().__init__(f"{field}: {message}" if field else message)


class Expired(StoreError):
    status = 410


class Unavailable(StoreError):
    """The store cannot be opened at its path (a directory, a text file, an unreadable location) or its API
    server cannot be used (unreachable, failing, refusing the credentials)."""

    status = 503

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(self.describe(path, reason))

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"cannot open the store at {path}: {reason}"


class Missing(Unavailable):
    """No store exists at the path, and it was opened without creating one."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "no store exists there")


class Newer(Unavailable):
    """The store file was written by a newer capa-py in a layout this version does not know: it is
    refused, never rewritten to an older layout."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"cannot use the store at {path}: {reason}"


class ReadOnly(Unavailable):
    """The store file (or its directory) cannot be written: it is open for reading, writes are refused."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"the store at {path} is read-only ({reason}); nothing was changed"


class WriteFailed(Unavailable):
    """A write failed on the disk (full, or an I/O error): its transaction was rolled back."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"cannot write the store at {path}: {reason}; nothing was changed"


class Damaged(Unavailable):
    """The store file is corrupt."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return (
            f"the store at {path} is damaged ({reason}); recover what it still holds with "
            f"'sqlite3 {path} .recover | sqlite3 recovered.db' and use recovered.db as --state"
        )


class Unreadable(StoreError):
    """A stored object this version cannot read: a field (or a value) it does not know, written by a newer
    capa-py."""

    status = 500
