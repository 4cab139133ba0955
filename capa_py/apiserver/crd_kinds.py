"""The kinds the stored CustomResourceDefinitions define, served beside the registry's.

:class:`CrdKinds` follows the store's CRDs (a watch in a thread of the server, plus a re-read right after
the server itself writes one), so every ``capa serve`` process on one SQLite file serves the same kinds
within a moment. For each CRD it does what the API server's CRD controllers do: it sets
``status.acceptedNames``, ``storedVersions`` and the conditions ``NamesAccepted`` and ``Established``, and
serves each ``served: true`` version (:class:`ServedVersion`: discovery, pruning, defaulting and
validation against the version's schema, the status subresource, printer columns). A CRD being deleted
(``DELETE`` adds the ``customresourcecleanup.apiextensions.k8s.io`` finalizer) is ``Terminating``: its objects
are deleted, creating one is ``403 Forbidden``, and the finalizer goes once none is left.

Objects of every version are stored as one kind, under the version the CRD first stored
(``status.storedVersions[0]``), and served in any served version by changing ``apiVersion`` only (the
conversion strategy ``None``); reads get the storage version's defaults.

A served version is :mod:`~capa_py.apiserver.crd_versions`; what the CRD controllers do to a CRD (its status,
its deletion) is :mod:`~capa_py.apiserver.crd_lifecycle`.

A CRD for a kind capa-py models (same group, and same plural or kind: the CRDs of ``capa manifests crds``,
or Cluster API's own) does not replace the model: the model keeps serving the kind with its full admission,
its objects stay when the CRD is deleted, and the CRD lends the kind its printer columns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.custom_resource import CustomResource, define_custom_kind
from capa_py.api.meta import KubeObject
from capa_py.api.registry import KindRegistry
from capa_py.apiserver.crd_lifecycle import (
    CLEANUP_FINALIZER,
    clean_up,
    establish,
    mark_terminating,
    set_terminating,
    terminating_condition,
    with_cleanup_finalizer,
)
from capa_py.apiserver.crd_versions import Names, ServedVersion, version_priority
from capa_py.apiserver.discovery import group_version
from capa_py.apiserver.printer_columns import AGE_COLUMN
from capa_py.apiserver.schema_validation import StructuralSchema
from capa_py.logging import get_logger
from capa_py.manifests.crds import INSTALLED_BY_OTHERS, PRINTER_COLUMNS, is_builtin_group
from capa_py.store.errors import Conflict, NotFound, StoreError
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore

__all__ = [
    "CLEANUP_FINALIZER",
    "IDLE_RELIST_SECONDS",
    "CrdKinds",
    "Names",
    "ServedVersion",
    "version_priority",
]

IDLE_RELIST_SECONDS = 30.0
"""How often the CRDs are read again when no watch event came (a safety net; events come first)."""

_log = get_logger("apiserver.crds")


@dataclass
class _Snapshot:
    served: dict[tuple[str, str, str], ServedVersion] = field(default_factory=dict)
    model_columns: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    models: dict[str, type[CustomResource]] = field(default_factory=dict)
    terminating: bool = False


class _LiveRegistry(KindRegistry):
    """The registry's kinds plus the CRD-defined ones, replaced whole on every change."""

    def replace(self, models: Iterable[type[KubeObject]]) -> None:
        self._by_gvk = {(m.API_VERSION, m.KIND): m for m in models}


def _subresources(crd_version: dict[str, Any]) -> bool:
    return "status" in (crd_version.get("subresources") or {})


def _schema(crd_version: dict[str, Any]) -> dict[str, Any] | None:
    schema = (crd_version.get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, dict) else None


class CrdKinds:
    """The CRD-defined kinds a server serves, kept in step with the store's CRDs (see the module doc)."""

    def __init__(self, store: ObjectStore, base: KindRegistry) -> None:
        self.store = store
        self.base = base
        self.registry = _LiveRegistry()
        self.registry.replace(base.kinds())
        self._snapshot = _Snapshot()
        self._models: dict[tuple[str, str, str, bool, bool], type[CustomResource]] = {}
        self._refreshing = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capa-crd-kinds", daemon=True)

    # -- what requests ask ------------------------------------------------------------------------------
    def lookup(self, group: str, version: str, plural: str) -> ServedVersion | None:
        return self._snapshot.served.get((group, version, plural))

    def served(self) -> list[ServedVersion]:
        return list(self._snapshot.served.values())

    def columns(self, model: type[KubeObject], served: ServedVersion | None) -> list[dict[str, Any]] | None:
        """The printer columns of a kind's Table; ``None`` for a Kubernetes kind (the server's own)."""
        if served is not None:
            return served.columns
        group, _ = group_version(model)
        if is_builtin_group(group):
            return None
        stored = self._snapshot.model_columns.get((model.API_VERSION, model.KIND))
        if stored is not None:
            return stored or [AGE_COLUMN]
        if group in INSTALLED_BY_OTHERS:
            return [AGE_COLUMN]
        return PRINTER_COLUMNS.get(model.KIND, [AGE_COLUMN])

    # -- discovery ---------------------------------------------------------------------------------------
    def _versions(self, group: str) -> set[str]:
        return {s.version for s in self._snapshot.served.values() if s.group == group}

    def group_list(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``/apis`` with the CRD groups and versions added."""
        groups = {g["name"]: g for g in doc["groups"]}
        for group in sorted({s.group for s in self._snapshot.served.values()}):
            known = {v["version"] for v in groups[group]["versions"]} if group in groups else set()
            groups[group] = self._group_entry(group, known | self._versions(group))
        return {**doc, "groups": list(groups.values())}

    def group(self, doc: dict[str, Any] | None, group: str) -> dict[str, Any] | None:
        versions = self._versions(group)
        if not versions:
            return doc
        known = {v["version"] for v in doc["versions"]} if doc is not None else set()
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group, known | versions)}

    @staticmethod
    def _group_entry(group: str, versions: set[str]) -> dict[str, Any]:
        ordered = sorted(versions, key=version_priority, reverse=True)
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered]
        return {"name": group, "versions": listed, "preferredVersion": listed[0]}

    def resource_list(self, doc: dict[str, Any] | None, group: str, version: str) -> dict[str, Any] | None:
        served = sorted(
            (s for s in self._snapshot.served.values() if (s.group, s.version) == (group, version)),
            key=lambda s: s.names.plural,
        )
        if not served:
            return doc
        entries = [e for s in served for e in s.discovery()]
        if doc is None:
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": entries,
            }
        return {**doc, "resources": list(doc["resources"]) + entries}

    # -- following the store ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                since = self.refresh()
                wait = 0.5 if self._snapshot.terminating else IDLE_RELIST_SECONDS
                for _ in self.store.watch(
                    CustomResourceDefinition, resource_version=since, timeout=wait, stop=self._stop
                ):
                    break
            except StoreError as exc:
                _log.warning("reading the CRDs failed", error=str(exc))
                self._stop.wait(1.0)
            except Exception:  # a bug must not stop serving CRD kinds for good
                _log.exception("reading the CRDs failed")
                self._stop.wait(1.0)

    def _modelled(self, group: str, names: Names) -> type[KubeObject] | None:
        """The registry's model for the kind a CRD names (same group, and same plural or kind)."""
        for model in self.base.kinds():
            if group_version(model)[0] == group and names.plural == model.PLURAL:
                return model
            if group_version(model)[0] == group and names.kind == model.KIND:
                return model
        return None

    def _model(
        self, group: str, version: str, names: Names, namespaced: bool, has_status: bool
    ) -> type[CustomResource]:
        key = (f"{group}/{version}", names.kind, names.plural, namespaced, has_status)
        model = self._models.get(key)
        if model is None:
            model = define_custom_kind(
                key[0], names.kind, names.plural, namespaced, has_status, names.short_names
            )
            self._models[key] = model
        return model

    def refresh(self) -> str:
        """Read the CRDs again, serve what they define, and bring their status up to date; the
        resourceVersion read."""
        with self._refreshing:
            crds = self.store.list(CustomResourceDefinition)
            snapshot = _Snapshot()
            models: list[type[KubeObject]] = []
            for crd in crds:
                self._serve(crd, snapshot, models)
            self.registry.replace([*self.base.kinds(), *models])
            self._snapshot = snapshot
            for crd in crds:
                # One changed meanwhile: its event brings another refresh.
                with contextlib.suppress(Conflict, NotFound):
                    self._reconcile(crd)
            return crds.resource_version

    def _serve(
        self, crd: CustomResourceDefinition, snapshot: _Snapshot, models: list[type[KubeObject]]
    ) -> None:
        spec = crd.spec
        names = Names.of(spec.names.model_dump(by_alias=True, exclude_none=True))
        group = spec.group
        if not group or not names.plural or not names.kind:
            return
        modelled = self._modelled(group, names)
        if modelled is not None:
            for version in spec.versions:
                key = (f"{group}/{version.get('name')}", modelled.KIND)
                snapshot.model_columns[key] = list(version.get("additionalPrinterColumns") or [])
            return
        storage = next((v for v in spec.versions if v.get("storage")), None)
        if storage is None:
            return
        stored_as = (crd.status.stored_versions or [str(storage.get("name"))])[0]
        namespaced = spec.scope != "Cluster"
        model = self._model(group, stored_as, names, namespaced, _subresources(storage))
        models.append(model)
        snapshot.models[crd.metadata.name] = model
        terminating = crd.being_deleted
        snapshot.terminating = snapshot.terminating or terminating
        storage_schema = StructuralSchema(_schema(storage))
        for version in spec.versions:
            if not version.get("served"):
                continue
            name = str(version.get("name"))
            snapshot.served[(group, name, names.plural)] = ServedVersion(
                crd=crd.metadata.name,
                group=group,
                version=name,
                names=names,
                namespaced=namespaced,
                has_status=model.HAS_STATUS,
                schema=StructuralSchema(_schema(version)),
                storage_schema=storage_schema,
                columns=list(version.get("additionalPrinterColumns") or [AGE_COLUMN]),
                model=model,
                terminating=terminating,
            )

    # -- what the CRD controllers do ----------------------------------------------------------------------
    def _reconcile(self, crd: CustomResourceDefinition) -> None:
        if crd.being_deleted:
            if CLEANUP_FINALIZER in crd.metadata.finalizers:
                clean_up(self.store, crd, self._snapshot.models.get(crd.metadata.name))
            return
        establish(self.store, crd)

    def delete_definition(self, name: str, precondition_rv: str | None) -> dict[str, Any] | None:
        """``DELETE`` of a CRD that defines a kind: marked (with the cleanup finalizer) and Terminating, its
        objects deleted by :meth:`refresh`; ``None`` when the CRD is for a modelled kind (deleted as any
        object is)."""
        crd = self.store.get(CustomResourceDefinition, name)
        if name not in self._snapshot.models:
            return None
        if precondition_rv and precondition_rv != crd.metadata.resource_version:
            raise Conflict("resourceVersion precondition failed")
        if not crd.being_deleted:
            if CLEANUP_FINALIZER not in crd.metadata.finalizers:
                # A refresh may bring the CRD's status up to date meanwhile: a conflict is retried on the
                # current object, never answered to the client as 409.
                crd = retry_on_conflict(self.store, crd, with_cleanup_finalizer)
            marked = self.store.delete(CustomResourceDefinition, name, None, "Background")
            if marked is None:
                return None
            reason = "InstanceDeletionPending"
            message = "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon"
            try:
                crd = mark_terminating(self.store, marked, reason, message)
            except NotFound:
                # The CRD controller of another server on the store (or this one's) finished the deletion
                # meanwhile: the answer is still the CRD as this DELETE marked it, Terminating.
                crd = marked.model_copy(deep=True)
                set_terminating(crd, terminating_condition(None, reason, message))
        return crd.to_dict()
