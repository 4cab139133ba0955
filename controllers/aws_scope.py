"""What an AWS reconcile carries (like Cluster API Provider AWS's scopes), and the step action.

A :class:`ReconcileScope` holds the object being reconciled (kept current by the engine's recorder), the
AWS clients of its region, the engine, and the status changes to patch at the end. :class:`Step` turns a
function of the scope into a ctrlkit action that maps outcomes to a condition and a queue result:

* success → condition True;
* :class:`~capa_py.engine.errors.Waiting` → condition False (Info) and requeue after the wait;
* retryable errors (throttling, a failed status write, a failed tag) → condition False (Warning) and a
  requeue with backoff;
* fatal errors (permission, validation, a bad AMI, a failed rollback) → condition False (Error),
  ``failureReason``/``failureMessage`` set, and a long requeue — no retry storm against AWS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from capa_py.api.cluster import Cluster
from capa_py.api.conditions import READY, set_condition, summarize_ready
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.errors import AWSError, Fatal, Retryable
from capa_py.aws.errors import NotFound as AWSNotFound
from capa_py.aws.session import AWSClients
from capa_py.ctrlkit.action import Action, Context
from capa_py.ctrlkit.result import Result, requeue_after
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.errors import NonRetryableError, RetryableError, Waiting
from capa_py.engine.recorder import StatusRecorder
from capa_py.engine.tags import tagging_store_uid
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore
from controllers.base import patch_status, resolve_ref
from controllers.events import ResourceEventReporter, failure_reason

T = TypeVar("T", bound=KubeObject)
FATAL_BACKOFF = 300.0
_log = get_logger("controller.aws")


BOOTSTRAP_KEY = "value"
"""The key of a bootstrap data secret that holds the data (Cluster API's convention)."""

OwnerT = TypeVar("OwnerT", bound=KubeObject)


@dataclass(frozen=True)
class Owners(Generic[OwnerT]):
    """What an infrastructure object (AWSMachine, AWSMachinePool) hangs from: the Cluster API object that
    owns it, that object's Cluster, and the Cluster's infrastructure (the AWSCluster, or whatever else the
    reference names: callers check its type)."""

    owner: OwnerT | None
    cluster: Cluster | None
    infrastructure: KubeObject | None


def resolve_owners(
    store: ObjectStore, obj: KubeObject, owner_kind: type[OwnerT], cluster_name: Callable[[OwnerT], str]
) -> Owners[OwnerT]:
    """Follow ``obj``'s owner reference of ``owner_kind`` to its owner, the owner's Cluster (by
    ``cluster_name``) and the Cluster's infrastructure reference; a missing link leaves the rest None."""
    ref = next((r for r in obj.metadata.owner_references if r.kind == owner_kind.KIND), None)
    owner = get_or_none(store, owner_kind, ref.name, obj.namespace) if ref else None
    cluster = get_or_none(store, Cluster, cluster_name(owner), obj.namespace) if owner else None
    infrastructure = resolve_ref(store, cluster.spec.infrastructure_ref, obj.namespace) if cluster else None
    return Owners(owner, cluster, infrastructure)


def bootstrap_data(
    store: ObjectStore, namespace: str | None, secret_name: str | None, unnamed: str
) -> tuple[bytes, Secret] | str:
    """The bootstrap data in the secret ``secret_name`` (its :data:`BOOTSTRAP_KEY`) and the secret, or why
    it cannot be read yet (``unnamed`` when no secret is named): the caller waits with
    ``WaitingForBootstrapData``."""
    if not secret_name:
        return unnamed
    secret = get_or_none(store, Secret, secret_name, namespace)
    if secret is None:
        return f"secret {secret_name} does not exist"
    try:
        return secret.value(BOOTSTRAP_KEY), secret
    except KeyError:
        return f"secret {secret_name} has no key {BOOTSTRAP_KEY!r}"


class FatalReconcileError(Exception):
    """A step failed in a way retrying cannot fix; the object carries the reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass
class ReconcileScope(Generic[T]):
    store: ObjectStore
    recorder: StatusRecorder[T]
    engine: Engine
    aws: AWSClients
    cluster_name: str
    additional_tags: dict[str, str] = field(default_factory=dict)
    status_changes: list[Callable[[Any], None]] = field(default_factory=list)
    failure: FatalReconcileError | None = None
    waiting_on: str | None = None
    """What the last step that had to wait was waiting for (shown while deleting)."""
    events: EventRecorder | None = None
    """Where Kubernetes Events about the object go (none recorded when None)."""

    @property
    def obj(self) -> T:
        return self.recorder.obj

    _engine_scope: Scope | None = None

    @property
    def engine_scope(self) -> Scope:
        if self._engine_scope is None:
            self._engine_scope = Scope(
                self.cluster_name,
                self.obj.uid,
                self.recorder,
                self.additional_tags,
                store_uid=tagging_store_uid(self.obj.metadata.annotations, self.store.uid),
                events=(
                    ResourceEventReporter(self.events, lambda: self.obj) if self.events is not None else None
                ),
            )
        return self._engine_scope

    def change_status(self, change: Callable[[Any], None]) -> None:
        """Apply a status change now (in memory) and again when the status is patched."""
        change(self.obj)
        self.status_changes.append(change)

    def condition(
        self,
        condition_type: str,
        ok: bool,
        reason: str | None = None,
        message: str | None = None,
        severity: str | None = None,
    ) -> None:
        def change(obj: Any) -> None:
            set_condition(obj.status, condition_type, ok, reason, message, severity)

        self.change_status(change)

    def update_spec(self, mutate: Callable[[T], None]) -> None:
        """Write a change to the object's spec now (re-applied on conflict) and keep the view in step."""
        updated = retry_on_conflict(self.store, self.obj, mutate)
        self.obj.spec = updated.spec  # type: ignore[attr-defined]
        self.obj.metadata.resource_version = updated.metadata.resource_version
        self.obj.metadata.generation = updated.metadata.generation

    def mark_ready(self) -> None:
        def ready(obj: Any) -> None:
            obj.status.ready = True
            obj.status.failure_reason = None
            obj.status.failure_message = None
            set_condition(obj.status, READY, True)

        self.change_status(ready)

    def summarize(self, condition_types: Sequence[str]) -> None:
        """End of a create pass: observedGeneration, the failure (if a step failed permanently), and
        ``Ready`` summarised from ``condition_types`` (:func:`~capa_py.api.conditions.summarize_ready`)."""
        generation = self.obj.metadata.generation
        failure = self.failure

        def summary(obj: Any) -> None:
            status = obj.status
            status.observed_generation = generation
            if failure is not None:
                status.failure_reason = failure.reason
                status.failure_message = str(failure)
                status.ready = False
            else:
                # A pass that met no permanent failure (after the spec was fixed) clears the old one.
                status.failure_reason = None
                status.failure_message = None
            # A condition not set yet is a step this pass did not reach; whether the pass finished is
            # status.ready (set by mark_ready, cleared by a failure), so Ready turns False while something
            # it depends on has drifted or failed since.
            status.ready = summarize_ready(status, condition_types, complete=bool(status.ready))

        self.change_status(summary)

    def patch(self) -> T:
        """Write the collected status changes (nothing is written when nothing changed)."""
        changes = list(self.status_changes)

        def apply(obj: Any) -> None:
            for change in changes:
                change(obj)

        # Compare with what is stored, not with the in-memory object (which already holds the changes).
        stored = self.store.get(type(self.obj), self.obj.name, self.obj.namespace)
        written = patch_status(self.store, stored, apply)
        self.recorder.obj = written
        return written


def classify_failure(exc: Exception) -> tuple[str, bool]:
    """(reason, fatal) for an exception raised by a step."""
    if isinstance(exc, NonRetryableError):
        return exc.reason, True
    if isinstance(exc, Fatal):
        return exc.code or type(exc).__name__, True
    if isinstance(exc, AWSNotFound):
        return exc.code or "NotFound", False
    if isinstance(exc, AWSError):
        return exc.code or type(exc).__name__, not isinstance(exc, Retryable)
    if isinstance(exc, RetryableError):
        return "Retrying", False
    return type(exc).__name__, False


SCOPE = "scope"
"""The key of the reconcile's scope in the ctrlkit context's values: a workflow is declared once, at module
level, and each run is given its scope (:func:`in_scope`)."""

S = TypeVar("S", bound="ReconcileScope[Any]")


def in_scope(scope: ReconcileScope[Any]) -> Context:
    """The context a declared workflow runs with over ``scope``."""
    return Context(values={SCOPE: scope})


def run_step(
    scope: ReconcileScope[Any],
    description: str,
    fn: Callable[[], Result | None],
    condition: str | None = None,
    condition_on_success: bool = True,
) -> Result | None:
    """Run one reconcile step and map its outcome to a condition and a result.

    ``condition_on_success=False``: the step sets its condition only when it waits or fails, and leaves
    success to a later step sharing the condition (a create followed by a wait for what it created), so
    the condition does not flip to True and back within one pass."""
    try:
        result = fn()
    except Waiting as exc:
        scope.waiting_on = f"{description}: {exc}"
        if condition:
            scope.condition(condition, False, "Waiting", str(exc), "Info")
        return requeue_after(exc.requeue_after)
    except Exception as exc:
        reason, fatal = classify_failure(exc)
        message = str(exc)
        scope.waiting_on = f"{description}: {reason}: {message}"
        if scope.events is not None:
            scope.events.warning(scope.obj, failure_reason(description), f"{reason}: {message}")
        if condition:
            scope.condition(condition, False, reason, message, "Error" if fatal else "Warning")
        if fatal:
            scope.failure = FatalReconcileError(reason, message)
            _log.error(
                "reconcile step failed permanently",
                step=description,
                reason=reason,
                error=message,
                object=scope.obj.ref(),
            )
            return requeue_after(FATAL_BACKOFF)
        return Result(error=exc)
    if condition and condition_on_success and (result is None or not result.interrupts):
        scope.condition(condition, True)
    return result


class Step(Action, Generic[S]):
    """A ctrlkit leaf running ``fn`` over the scope its context carries (:data:`SCOPE`), its outcome mapped
    to ``condition`` and a result by :func:`run_step`. ``fn`` is a function of the scope (a service's step,
    or an unbound method of the scope), so a workflow of steps is declared without any scope, and drawn
    without a store or AWS clients."""

    def __init__(
        self,
        description: str,
        fn: Callable[[S], Result | None],
        condition: str | None = None,
        condition_on_success: bool = True,
    ) -> None:
        self.description = description
        self.fn = fn
        self.condition = condition
        self.condition_on_success = condition_on_success

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        scope: S = ctx.values[SCOPE]
        return run_step(
            scope, self.description, lambda: self.fn(scope), self.condition, self.condition_on_success
        )
