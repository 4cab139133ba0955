"""The error handler and the diagnostics bundle it writes when a task or a hook raises.

A bundle is a directory ``<diagnostics dir>/<workflow id>-<UTC time>/`` holding ``failure.json`` (the
workflow, the task, the exception and its traceback) and one ``<collector>.json`` per registered
:class:`DiagnosticsCollector`. Collectors shipped here: :class:`StoreCollector` (objects, their
conditions and the Events of an object store), :class:`AWSCallCollector` (the AWS calls the run made, by
operation and outcome) and :class:`LogCollector` (the structured log lines emitted during the run).

Nothing secret is written: Secrets appear with their names and keys only, and any field or log key that
names a secret, a token, a password or user/vendor data has its value replaced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import structlog

from capa_py.api.core import Event, Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.logging import REDACTED, get_logger, redact_secrets
from capa_py.store.protocol import ObjectStore
from capa_py.workflow.task import Failure

log = get_logger("workflow.diagnostics")

_SENSITIVE = (
    "password",
    "secret",
    "token",
    "credential",
    "access_key",
    "userdata",
    "user_data",
    "vendordata",
    "vendor_data",
    "authorization",
    "private_key",
    "kubeconfig_data",
)
_HARMLESS_SUFFIXES = ("_name", "_names", "_ref", "_count", "_keys")


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower().replace("-", "_")


def is_sensitive_key(key: str) -> bool:
    """Whether a field or log key names a value that must never reach a bundle."""
    snake = _snake(key)
    if snake.endswith(_HARMLESS_SUFFIXES):
        return False
    return any(marker in snake for marker in _SENSITIVE)


def redact(value: Any) -> Any:
    """A copy of a JSON value with the values of sensitive keys replaced."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_sensitive_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


class DiagnosticsCollector(Protocol):
    """Something that contributes a part to the diagnostics bundle."""

    @property
    def name(self) -> str:
        """The bundle file this collector fills (``<name>.json``)."""
        ...

    def recording(self) -> AbstractContextManager[object]:
        """Entered for the whole workflow run (to record what happens during it)."""
        ...

    def collect(self) -> object:
        """A JSON-serialisable value; called only when the workflow fails."""
        ...


def _object_dump(obj: KubeObject) -> dict[str, Any]:
    if isinstance(obj, Secret):
        keys = sorted({*obj.data, *obj.string_data})
        return {
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "metadata": {"name": obj.name, "namespace": obj.metadata.namespace},
            "type": obj.type,
            "dataKeys": keys,
        }
    dumped: dict[str, Any] = redact(obj.model_dump(mode="json", by_alias=True, exclude_none=True))
    return dumped


class StoreCollector:
    """Every object of the given kinds in a store, their conditions, and the store's Events."""

    def __init__(
        self,
        store: ObjectStore | None,
        kinds: Sequence[type[KubeObject]],
        namespace: str | None = None,
        name: str = "store",
    ) -> None:
        self.store = store
        self.kinds = list(kinds)
        self.namespace = namespace
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def recording(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def collect(self) -> object:
        assert self.store is not None, "a StoreCollector needs a store"
        return self.collect_from(self.store)

    def collect_from(self, store: ObjectStore) -> object:
        objects: list[dict[str, Any]] = []
        conditions: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        errors: list[str] = []
        kinds: list[type[KubeObject]] = [*self.kinds, Event]
        for kind in kinds:
            try:
                namespace = self.namespace if kind.NAMESPACED else None
                items: list[KubeObject] = store.list(kind, namespace=namespace)
            except Exception as exc:  # a bundle is best effort: note what could not be read
                errors.append(f"{kind.KIND}: {type(exc).__name__}: {exc}")
                continue
            for obj in items:
                if isinstance(obj, Event):
                    events.append(_object_dump(obj))
                    continue
                objects.append(_object_dump(obj))
                status: Any = getattr(obj, "status", None)
                for condition in getattr(status, "conditions", None) or []:
                    conditions.append(
                        {
                            "object": obj.ref(),
                            **condition.model_dump(mode="json", by_alias=True, exclude_none=True),
                        }
                    )
        return {"objects": objects, "conditions": conditions, "events": events, "errors": errors}


class ClusterStoreCollector(StoreCollector):
    """A :class:`StoreCollector` over whichever cluster ``find()`` names when the bundle is written (a
    workflow's clusters come and go while it runs); nothing when it names none. The store it opens is
    closed after reading."""

    def __init__(
        self,
        find: Callable[[], ObjectStore | None],
        kinds: Sequence[type[KubeObject]],
        namespace: str | None = None,
        name: str = "store",
    ) -> None:
        super().__init__(None, kinds, namespace, name)
        self.find = find

    def collect(self) -> object:
        store = self.find()
        if store is None:
            return {"objects": [], "conditions": [], "events": [], "errors": ["no cluster to read"]}
        try:
            return self.collect_from(store)
        finally:
            store.close()


class AWSCallCollector:
    """The AWS calls made during the run (in its context), by operation and by outcome."""

    name = "aws-calls"

    def __init__(self) -> None:
        self.counter = CallCounter()

    @contextlib.contextmanager
    def _record(self) -> Iterator[object]:
        with call_scope(self.counter):
            yield self.counter

    def recording(self) -> AbstractContextManager[object]:
        return self._record()

    def collect(self) -> object:
        return {
            "total": self.counter.total(),
            "mutating": self.counter.mutating_operations(),
            "byOperation": self.counter.by_operation(),
            "byOutcome": self.counter.by_outcome(),
        }


class LogCollector:
    """The structured log lines emitted while the workflow runs, whatever the configured log level.

    A processor is added in front of the renderer for the run; it keeps a redacted copy of every event
    dict and then drops the events below the configured level, so the console output is unchanged.
    """

    name = "log"

    def __init__(self, limit: int = 5000) -> None:
        self.limit = limit
        self.lines: list[dict[str, Any]] = []

    def _capture(self, minimum: int) -> Any:
        def processor(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
            line = {
                k: (v if isinstance(v, (str, int, float, bool, type(None))) else repr(v))
                for k, v in redact_secrets(None, method, dict(event_dict)).items()
            }
            line.setdefault("level", method)
            if len(self.lines) < self.limit:
                self.lines.append(redact(line))
            if logging.getLevelNamesMapping().get(method.upper(), logging.INFO) < minimum:
                raise structlog.DropEvent
            return event_dict

        return processor

    @contextlib.contextmanager
    def _record(self) -> Iterator[object]:
        config = structlog.get_config()
        processors = list(config["processors"])
        wrapper = config["wrapper_class"]
        level_of = getattr(wrapper, "get_effective_level", None)
        minimum = level_of(wrapper(None, [], {})) if level_of is not None else logging.NOTSET
        structlog.configure(
            processors=[*processors[:-1], self._capture(minimum), *processors[-1:]],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        )
        try:
            yield self.lines
        finally:
            structlog.configure(processors=processors, wrapper_class=wrapper)

    def recording(self) -> AbstractContextManager[object]:
        return self._record()

    def collect(self) -> object:
        return self.lines


class ErrorHandler:
    """Writes the failure and what the collectors provide to a new bundle directory under ``directory``
    (``<state dir>/diagnostics`` when not given)."""

    def __init__(
        self, collectors: Sequence[DiagnosticsCollector] = (), directory: Path | None = None
    ) -> None:
        self.collectors = list(collectors)
        self.directory = directory

    def write_bundle(self, workflow: str, workflow_id: str, failure: Failure, state_dir: Path) -> Path:
        root = self.directory if self.directory is not None else state_dir / "diagnostics"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        bundle = root / f"{workflow_id}-{stamp}"
        bundle.mkdir(parents=True, exist_ok=False)
        record = {"workflow": workflow, "workflowId": workflow_id, **_failure_json(failure)}
        _write_json(bundle / "failure.json", record)
        for collector in self.collectors:
            try:
                part = collector.collect()
            except Exception as exc:  # one broken collector must not lose the rest of the bundle
                log.warning("diagnostics collector failed", collector=collector.name, error=str(exc))
                part = {"error": f"{type(exc).__name__}: {exc}"}
            _write_json(bundle / f"{collector.name}.json", part)
        return bundle


def _failure_json(failure: Failure) -> dict[str, Any]:
    return {
        "task": failure.task,
        "phase": failure.phase,
        "errorType": failure.error_type,
        "message": failure.message,
        "traceback": failure.traceback,
    }


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
