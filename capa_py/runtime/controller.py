"""What the controller manager (:mod:`capa_py.runtime.manager`) asks of a controller, and what it tells
those who watch it: the :class:`Controller` protocol, the keys and fingerprints of objects, the reconcile
observer and the manager's listener, the scope of a manager, and controller-runtime's result label."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import WatchEvent


def key_of(obj: KubeObject) -> ObjectKey:
    return ObjectKey(obj.KIND, obj.metadata.namespace or "", obj.metadata.name)


def desired_fingerprint(obj: KubeObject) -> str:
    """Everything but status and resourceVersion: what a controller reacts to on its own kind."""
    doc = obj.to_dict()
    doc.pop("status", None)
    doc.get("metadata", {}).pop("resourceVersion", None)
    return json.dumps(doc, sort_keys=True)


class Controller(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> type[KubeObject]: ...

    @property
    def watched_kinds(self) -> Sequence[type[KubeObject]]: ...

    def reconcile(self, key: ObjectKey) -> Result: ...

    # Optional: ``status_kinds``, the watched kinds whose *status* changes matter to this controller.
    # A status-only change of any other watched kind is not passed to ``map_event``.
    # Optional: ``views``, per watched kind name, a function giving what of such an object the controller
    # reacts to; a modification that leaves that view unchanged is not passed to ``map_event``.

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]: ...


class ReconcileObserver(Protocol):
    def reconciled(self, controller: str, result: str, seconds: float) -> None: ...


class ManagerListener(Protocol):
    """Hears what a manager sees, on the thread that saw it (``listed`` and ``dispatched`` on the one
    polling the store, ``reconciled`` on a worker): keep each call short."""

    def listed(self, kind: str, objects: Sequence[KubeObject]) -> None:
        """Every object of ``kind`` as a (re-)list found it; one not listed is gone."""
        ...

    def dispatched(self, event: WatchEvent[KubeObject]) -> None:
        """A change to an object in scope, as the watch delivered it (its object already parsed)."""
        ...

    def reconciled(self, key: ObjectKey) -> None:
        """A reconcile of ``key`` finished and its result went to the queue."""
        ...


Scope = Callable[[ObjectKey], bool]
"""Which objects a manager reconciles (None: every object of a controlled kind)."""


def result_label(result: Result) -> str:
    """controller-runtime's ``result`` label: error, requeue, requeue_after or success."""
    if result.error is not None:
        return "error"
    if result.requeue:
        return "requeue"
    if result.requeue_after > 0:
        return "requeue_after"
    return "success"
