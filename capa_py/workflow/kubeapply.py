"""Applying arbitrary manifests to a cluster's API server: the CNI a cluster config names, a provider's
components.

The typed :class:`~capa_py.store.protocol.ObjectStore` knows only the kinds capa-py models; a CNI manifest
holds whatever its authors chose (DaemonSets, RBAC, ConfigMaps, CRDs and objects of those CRDs). So this
module talks to the API server through the official client's ``DynamicClient``, which maps any
apiVersion/kind onto a REST path by discovery, as kubectl does.

Applying is create-or-merge, one document at a time, in order, stopping at the first that fails:

* absent: created;
* present: a JSON merge patch of the document, sent only when it would change something. A first check is
  local (the document merged onto the stored object); when that says "changed" the patch is sent as a dry
  run and its answer compared with the stored object, because servers default and normalise fields (a
  container's ``imagePullPolicy``, a Secret's ``stringData``) that a manifest leaves out, and without the
  dry run such a document would be reported ``configured`` on every apply;
* a document whose kind a CRD earlier in the same list defines waits for that kind to appear in discovery
  (a real API server serves a new CRD's kind a moment after accepting it).

Errors:

* :class:`ManifestError` (a ``ValueError``): the manifest or a document is wrong, or the server refused a
  document. It names the source or the document (``cni.yaml: document 3: metadata.name: required``) and,
  for an apply, which documents were applied before it (:attr:`ManifestError.applied`). Fix the manifest.
* :class:`ClusterUnreachable` (a ``ConnectionError``): the API server did not answer. Retry later; every
  document applied so far is applied again as ``unchanged``.

Neither the errors nor the log lines carry a document's contents: a manifest may hold Secrets, and a
kubeconfig holds credentials.

Reading manifests lives in :mod:`capa_py.workflow.manifest_read`, a cluster's kubeconfig in
:mod:`capa_py.workflow.kubeconfigs`; their names are also exported here.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import (
    DynamicApiError,
    NotFoundError,
    ResourceNotFoundError,
    ResourceNotUniqueError,
)

from capa_py.apiserver.patch import MERGE, merge_patch
from capa_py.logging import get_logger
from capa_py.scratch import kube_client_files
from capa_py.workflow.kubeconfigs import (
    KUBECONFIG_KEY,
    cluster_kubeconfig,
    kubeconfig_from_secret,
    kubeconfig_secret_name,
)
from capa_py.workflow.manifest_read import (
    AppliedDocument,
    ClusterUnreachable,
    ManifestError,
    Outcome,
    flatten_document,
    parse_manifest,
    read_manifest,
    yaml_problem,
)

CRD_POLL_INTERVAL = 0.25
SHOWN_APPLIED = 5
"""How many of the documents applied before a failing one its error lists by name."""
# Fields the server changes on every write, or on none: they say nothing about whether the document differs.
_VOLATILE_METADATA = ("resourceVersion", "managedFields")
# Metadata only the server sets. A manifest exported from a cluster or written by a generator carries some
# (``creationTimestamp: null``); sent in a merge patch they would be a precondition or a removal, not a wish.
_SERVER_OWNED_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)

_log = get_logger("workflow.kubeapply")


def _api_client(kubeconfig: dict[str, Any] | Path) -> client.ApiClient:
    """A client of its own: the process-wide default configuration stays as it was."""
    where = f"kubeconfig {kubeconfig}" if isinstance(kubeconfig, Path) else "kubeconfig"
    if isinstance(kubeconfig, Path) and not kubeconfig.is_file():
        raise ManifestError(f"{where}: no such file")
    configuration = client.Configuration()
    try:
        if isinstance(kubeconfig, Path):
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig),
                persist_config=False,
                client_configuration=configuration,
                temp_file_path=kube_client_files(),
            )
            return client.ApiClient(configuration)
        return config.new_client_from_config_dict(  # type: ignore[no-untyped-call,no-any-return]
            config_dict=kubeconfig,
            persist_config=False,
            client_configuration=configuration,
            temp_file_path=kube_client_files(),
        )
    except ConfigException as exc:
        raise ManifestError(f"{where}: not usable: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{where}: not YAML: {yaml_problem(exc)}") from exc
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        # The loader reports a malformed kubeconfig through whatever lookup failed first.
        raise ManifestError(f"{where}: not usable ({type(exc).__name__})") from exc


def document_ref(doc: dict[str, Any], namespaced: bool = True) -> str:
    """``Kind/namespace/name``, or ``Kind/name`` for a cluster-scoped kind or a document without namespace."""
    metadata = doc.get("metadata") or {}
    namespace = metadata.get("namespace") if namespaced else None
    parts = [doc.get("kind", "?"), namespace, metadata.get("name", "?")]
    return "/".join(str(p) for p in parts if p)


def _server_message(exc: DynamicApiError) -> str:
    try:
        status = json.loads(exc.body or b"{}")
    except (ValueError, TypeError):
        status = {}
    message = status.get("message") if isinstance(status, dict) else None
    return f"{exc.status} {message or exc.reason}"


def _crd_kinds(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs a CustomResourceDefinition document serves."""
    if doc.get("kind") != "CustomResourceDefinition" or not str(doc.get("apiVersion")).startswith(
        "apiextensions.k8s.io/"
    ):
        return set()
    spec = doc.get("spec") or {}
    group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
    if not group or not kind:
        return set()
    return {
        (f"{group}/{version['name']}", str(kind))
        for version in spec.get("versions") or []
        if isinstance(version, dict) and version.get("name") and version.get("served", True)
    }


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    metadata = result.get("metadata")
    if isinstance(metadata, dict):
        for field in _VOLATILE_METADATA:
            metadata.pop(field, None)
    return result


class _TimedDynamicClient(DynamicClient):
    """A dynamic client whose every request, discovery's included, gives up after ``timeout`` seconds:
    the library sends discovery requests with no timeout at all, so a server that accepts the connection
    and never answers would hang the apply."""

    def __init__(self, api: client.ApiClient, cache_file: str, timeout: float) -> None:
        # Set before the base class runs: its constructor already asks the server for discovery.
        self._timeout = timeout
        super().__init__(api, cache_file=cache_file)  # type: ignore[no-untyped-call]

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        params.setdefault("_request_timeout", self._timeout)
        return super().request(method, path, body, **params)


class _Applier:
    """One apply: the client, its discovery and what was applied so far."""

    def __init__(self, dynamic: DynamicClient, server: str, timeout: float) -> None:
        # The dynamic client's calls carry no annotations.
        self.dynamic: Any = dynamic
        self.server = server
        self.timeout = timeout
        self.applied: list[AppliedDocument] = []
        self.defined: dict[tuple[str, str], str] = {}  # (apiVersion, kind) -> the CRD defining it

    def fail(self, message: str) -> ManifestError:
        if self.applied:
            shown = ", ".join(a.ref for a in self.applied[:SHOWN_APPLIED])
            more = len(self.applied) - SHOWN_APPLIED
            message += f" (applied before it: {shown}{f' and {more} more' if more > 0 else ''})"
        return ManifestError(message, self.applied)

    def resource(self, doc: dict[str, Any], where: str) -> Any:
        """The discovered resource of a document's kind, waiting for a kind a CRD of this apply defines."""
        api_version, kind = doc["apiVersion"], doc["kind"]
        crd = self.defined.get((api_version, kind))
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                # A miss makes the client rediscover the server's groups before answering.
                return self.dynamic.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                if crd is None or time.monotonic() >= deadline:
                    break
            except ResourceNotUniqueError as exc:
                raise self.fail(f"{where}: kind {kind} of apiVersion {api_version} is ambiguous") from exc
            time.sleep(CRD_POLL_INTERVAL)
        message = f"{where}: kind {kind} of apiVersion {api_version} is not served by {self.server}"
        if crd is not None:
            message += (
                f" (CustomResourceDefinition {crd} was applied, but the kind did not appear in discovery "
                f"within {self.timeout:g}s)"
            )
        raise self.fail(message)

    def read(self, resource: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            response = self.dynamic.get(resource, name=name, namespace=namespace, serialize=False)
        except NotFoundError:
            return None
        return _json(response)

    def apply(self, number: int, doc: dict[str, Any]) -> AppliedDocument:
        where = f"document {number} ({document_ref(doc)})"
        resource = self.resource(doc, where)
        body = copy.deepcopy(doc)
        metadata = body["metadata"]
        for field in _SERVER_OWNED_METADATA:
            metadata.pop(field, None)
        if resource.namespaced:
            metadata["namespace"] = metadata.get("namespace") or "default"
            namespace: str | None = metadata["namespace"]
        else:
            # The server would refuse a namespace on a cluster-scoped kind's path; kubectl drops it too.
            metadata.pop("namespace", None)
            namespace = None
        ref = document_ref(body, resource.namespaced)
        where = f"document {number} ({ref})"
        name = metadata["name"]
        kwargs: dict[str, Any] = {"serialize": False}
        try:
            current = self.read(resource, name, namespace)
            if current is None:
                self.dynamic.create(resource, body=body, namespace=namespace, **kwargs)
                outcome: Outcome = "created"
            elif merge_patch(current, body) == current:
                outcome = "unchanged"
            else:
                patch = {"name": name, "namespace": namespace, "content_type": MERGE, **kwargs}
                dry = _json(self.dynamic.patch(resource, body=body, dry_run="All", **patch))
                if _comparable(dry) == _comparable(current):
                    outcome = "unchanged"
                else:
                    self.dynamic.patch(resource, body=body, **patch)
                    outcome = "configured"
        except DynamicApiError as exc:
            raise self.fail(f"{where}: refused by {self.server}: {_server_message(exc)}") from exc
        self.defined.update(dict.fromkeys(_crd_kinds(body), name))
        applied = AppliedDocument(ref=ref, outcome=outcome)
        self.applied.append(applied)
        _log.info("manifest document applied", document=number, ref=ref, outcome=outcome, server=self.server)
        return applied


def _json(response: Any) -> dict[str, Any]:
    data = json.loads(response.data or b"{}")
    return data if isinstance(data, dict) else {}


def apply_documents(
    kubeconfig: dict[str, Any] | Path, docs: Sequence[dict[str, Any]], *, timeout: float = 60.0
) -> list[AppliedDocument]:
    """Apply each document, in order, to the API server of ``kubeconfig`` (a parsed kubeconfig or its file;
    its current context): created when absent, merge-patched when it would change something, else left
    unchanged. A namespaced kind without ``metadata.namespace`` goes to ``default``. A document of a kind
    that a CustomResourceDefinition earlier in ``docs`` defines waits for that kind to be served.

    ``timeout`` bounds each request and each wait for a CRD's kind. Stops at the first document that fails
    with a :class:`ManifestError` naming it (number from 1 in ``docs``, and ref) and the server's message;
    an unreachable server is :class:`ClusterUnreachable`. Returns the outcome of every document."""
    checked = [
        item for number, doc in enumerate(docs, 1) for item in flatten_document(doc, f"document {number}")
    ]
    api = _api_client(kubeconfig)
    server = str(api.configuration.host)
    # The client caches discovery in a file named after the server's address; a file of our own keeps
    # it from outliving this apply (a later server on the same port would be answered from it).
    with api, tempfile.TemporaryDirectory(prefix="capa-discovery-") as cache:
        applier: _Applier | None = None
        try:
            dynamic = _TimedDynamicClient(api, str(Path(cache) / "discovery.json"), timeout)
            applier = _Applier(dynamic, server, timeout)
            _log.info("applying manifest", documents=len(checked), server=server)
            for number, doc in enumerate(checked, 1):
                applier.apply(number, doc)
            return applier.applied
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterUnreachable(f"the API server {server} does not answer: {exc}") from exc
        except DynamicApiError as exc:
            # Discovery itself was refused (credentials, a broken aggregated API).
            message = f"discovery refused by {server}: {_server_message(exc)}"
            raise (applier.fail(message) if applier else ManifestError(message)) from exc


__all__ = [
    "CRD_POLL_INTERVAL",
    "KUBECONFIG_KEY",
    "SHOWN_APPLIED",
    "AppliedDocument",
    "ClusterUnreachable",
    "ManifestError",
    "Outcome",
    "apply_documents",
    "cluster_kubeconfig",
    "document_ref",
    "kubeconfig_from_secret",
    "kubeconfig_secret_name",
    "parse_manifest",
    "read_manifest",
]
