"""The engine's recorder over the object store: IDs go into the owner's status the moment they exist.

Cluster API Provider AWS lost instances when an id recorded in a deferred patch conflicted with another
write; here every record is its own ``update_status`` (re-read and re-applied on Conflict), written right
after the create returns. The in-memory object is kept in step so the rest of the reconcile sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from capa_py.api.aws import IntentRecord, RecordedResource
from capa_py.api.meta import KubeObject
from capa_py.engine.errors import RecordError
from capa_py.store.errors import StoreError
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore


class _RecordingStatus(Protocol):
    resources: dict[str, RecordedResource]
    intents: dict[str, IntentRecord]


T = TypeVar("T", bound=KubeObject)


def _status(obj: KubeObject) -> _RecordingStatus:
    return obj.status  # type: ignore[attr-defined, no-any-return]


class StatusRecorder(Generic[T]):
    """Records into ``status.resources`` / ``status.intents`` of an AWSCluster or AWSMachine."""

    def __init__(self, store: ObjectStore, obj: T) -> None:
        self.store = store
        self.obj = obj

    def recorded(self, role: str) -> RecordedResource | None:
        return _status(self.obj).resources.get(role)

    def intent(self, role: str) -> IntentRecord | None:
        return _status(self.obj).intents.get(role)

    def record(self, role: str, resource: RecordedResource) -> None:
        def mutate(status: _RecordingStatus) -> None:
            status.resources[role] = resource
            status.intents.pop(role, None)

        self._write(mutate)

    def forget(self, role: str) -> None:
        if role not in _status(self.obj).resources and role not in _status(self.obj).intents:
            return

        def mutate(status: _RecordingStatus) -> None:
            status.resources.pop(role, None)
            status.intents.pop(role, None)

        self._write(mutate)

    def write_intent(self, role: str, intent: IntentRecord) -> None:
        def mutate(status: _RecordingStatus) -> None:
            status.intents[role] = intent

        self._write(mutate)

    def clear_intent(self, role: str) -> None:
        if role not in _status(self.obj).intents:
            return

        def mutate(status: _RecordingStatus) -> None:
            status.intents.pop(role, None)

        self._write(mutate)

    def _write(self, mutate: Callable[[_RecordingStatus], None]) -> None:
        def apply(obj: Any) -> None:
            mutate(_status(obj))

        try:
            written = retry_on_conflict(self.store, self.obj, apply, status=True)
        except StoreError as exc:
            raise RecordError(f"cannot write {self.obj.ref()} status: {exc}") from exc
        mutate(_status(self.obj))
        self.obj.metadata.resource_version = written.metadata.resource_version
        _status(self.obj).resources = dict(_status(written).resources)
        _status(self.obj).intents = dict(_status(written).intents)
