"""The scenarios of the differential suite: the same requests against ``capa serve`` and kube-apiserver.

Each scenario takes an :class:`Endpoint` and a namespace of its own (already created on both servers) and
returns what a client observes, step by step, reduced to what must agree: status codes, ``Status`` reasons
and causes, object fields, list contents, watch event types. What legitimately differs from one server to
another (uids, resourceVersions, timestamps, managedFields) is left out by :func:`view` and
:func:`status_view`.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from typing import Any

import yaml

from tests.conformance.endpoints import Endpoint, Reply
from tests.conformance.support import EXAMPLE
from tests.support.eventually import eventually

Observation = dict[str, Any]
Scenario = Callable[[Endpoint, str], Observation]
GROUP_PATH = "/apis/infrastructure.cluster.x-k8s.io/v1beta2"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def view(body: Any) -> Any:
    """An object as clients compare it: name, labels, finalizers, generation, whether it is being deleted,
    and its content (data, spec, status); a Status as :func:`status_view`."""
    if not isinstance(body, dict):
        return body
    if body.get("kind") == "Status":
        return status_view(body)
    meta = body.get("metadata") or {}
    seen: dict[str, Any] = {"kind": body.get("kind"), "name": meta.get("name")}
    for key in ("labels", "finalizers", "generation"):
        if meta.get(key):
            seen[key] = meta[key]
    if meta.get("deletionTimestamp"):
        seen["deleting"] = True
    for key in ("data", "spec", "status"):
        if body.get(key):
            seen[key] = body[key]
    return seen


def status_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Status as clients branch on it: code, reason, and the details' kind, name and causes' fields."""
    details = body.get("details") or {}
    seen: dict[str, Any] = {"code": body.get("code"), "reason": body.get("reason")}
    for key in ("kind", "name", "group"):
        if details.get(key):
            seen[key] = details[key]
    causes = details.get("causes") or []
    if causes:
        seen["causes"] = sorted({(c.get("reason"), c.get("field")) for c in causes}, key=str)
    return seen


def step(reply: Reply) -> dict[str, Any]:
    return {"status": reply.status, "body": view(reply.body)}


def names(reply: Reply) -> list[str]:
    return [item["metadata"]["name"] for item in (reply.body or {}).get("items", [])]


def configmap(
    name: str,
    labels: dict[str, str] | None = None,
    metadata_extra: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    if labels:
        doc["metadata"]["labels"] = labels
    doc["metadata"].update(metadata_extra or {})
    doc.update(extra)
    return doc


def aws_cluster(name: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        if doc and doc["kind"] == "AWSCluster":
            found = copy.deepcopy(doc)
            found["metadata"] = {"name": name}
            return found  # type: ignore[no-any-return]
    raise KeyError("AWSCluster")


def configmaps(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps"


def awsclusters(ns: str) -> str:
    return f"{GROUP_PATH}/namespaces/{ns}/awsclusters"


def wait_gone(ep: Endpoint, path: str, timeout: float = 60.0) -> bool:
    """Whether ``path`` answers 404 within ``timeout`` seconds (an observation, compared across servers)."""
    try:
        return eventually(lambda: ep.call("GET", path).status == 404, path, timeout=timeout, interval=0.2)
    except AssertionError:
        return False


def marked_for_deletion(ep: Endpoint, path: str, timeout: float = 60.0) -> Reply:
    """The reply to ``GET path`` once it shows a deletionTimestamp; the last one when none does within
    ``timeout`` seconds (an observation, compared across servers)."""
    replies: list[Reply] = []

    def marked() -> object:
        replies.append(ep.call("GET", path))
        return replies[-1].body["metadata"].get("deletionTimestamp")

    with contextlib.suppress(AssertionError):
        eventually(marked, path, timeout=timeout, interval=0.2)
    return replies[-1]


# -- scenarios ---------------------------------------------------------------------------------------------
def crud_builtin(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    created = ep.call("POST", base, configmap("one", data={"a": "1"}))
    rv = created.body["metadata"]["resourceVersion"]
    again = ep.call("POST", base, configmap("one"))
    fresh = ep.call("PUT", f"{base}/one", configmap("one", data={"a": "2"}))
    stale = copy.deepcopy(configmap("one", data={"a": "3"}))
    stale["metadata"]["resourceVersion"] = rv
    conflict = ep.call("PUT", f"{base}/one", stale)
    got = ep.call("GET", f"{base}/one")
    deleted = ep.call("DELETE", f"{base}/one")
    missing = ep.call("GET", f"{base}/one")
    return {
        "create": step(created),
        "create again": step(again),
        "update unconditionally": step(fresh),
        "update with a stale resourceVersion": step(conflict),
        "get": step(got),
        "delete": {"status": deleted.status, "kind": (deleted.body or {}).get("kind")},
        "get deleted": step(missing),
    }


def crud_custom(ep: Endpoint, ns: str) -> Observation:
    base = awsclusters(ns)
    created = ep.call("POST", base, aws_cluster("one"))
    again = ep.call("POST", base, aws_cluster("one"))
    unconditional = ep.call("PUT", f"{base}/one", aws_cluster("one"))
    current = copy.deepcopy(created.body)
    current["spec"]["additionalTags"] = {"team": "red"}
    updated = ep.call("PUT", f"{base}/one", current)
    deleted = ep.call("DELETE", f"{base}/one")
    missing = ep.call("GET", f"{base}/one")
    return {
        "create": {"status": created.status, "generation": created.body["metadata"].get("generation")},
        "create again": step(again),
        "update without a resourceVersion": step(unconditional),
        "update": {
            "status": updated.status,
            "generation": updated.body["metadata"].get("generation"),
            "tags": updated.body["spec"].get("additionalTags"),
        },
        "delete": {"status": deleted.status, "kind": (deleted.body or {}).get("kind")},
        "get deleted": step(missing),
    }


def status_subresource(ep: Endpoint, ns: str) -> Observation:
    base = awsclusters(ns)
    with_status = aws_cluster("st")
    with_status["status"] = {"ready": True}
    created = ep.call("POST", base, with_status)
    status_write = copy.deepcopy(created.body)
    status_write["status"] = {"ready": True}
    status_write["spec"]["additionalTags"] = {"ignored": "yes"}
    written = ep.call("PUT", f"{base}/st/status", status_write)
    main_write = copy.deepcopy(written.body)
    main_write["status"] = {"ready": False}
    main_write["spec"]["additionalTags"] = {"kept": "yes"}
    main = ep.call("PUT", f"{base}/st", main_write)
    patched = ep.call("PATCH", f"{base}/st/status", {"status": {"ready": False}}, MERGE)
    return {
        "create ignores status": created.body.get("status", {}).get("ready"),
        "status write": {
            "status": written.status,
            "ready": written.body["status"].get("ready"),
            "tags": written.body["spec"].get("additionalTags"),
            "generation": written.body["metadata"].get("generation"),
        },
        "main write": {
            "ready": main.body["status"].get("ready"),
            "tags": main.body["spec"].get("additionalTags"),
            "generation": main.body["metadata"].get("generation"),
        },
        "status patch": {"status": patched.status, "ready": patched.body["status"].get("ready")},
    }


def patch_types(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    ep.call("POST", base, configmap("p", data={"a": "1", "b": "2"}))
    merge = ep.call("PATCH", f"{base}/p", {"data": {"a": None, "c": "3"}}, MERGE)
    json_patch = ep.call(
        "PATCH", f"{base}/p", [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}], JSON_PATCH
    )
    failed_test = ep.call("PATCH", f"{base}/p", [{"op": "test", "path": "/data/b", "value": "9"}], JSON_PATCH)
    strategic = ep.call("PATCH", f"{base}/p", {"data": {"d": "4"}}, STRATEGIC)
    unknown_type = ep.call("PATCH", f"{base}/p", {"data": {}}, "text/plain")
    missing = ep.call("PATCH", f"{base}/nope", {"data": {}}, MERGE)
    return {
        "merge": step(merge),
        "json": step(json_patch),
        "json test fails": {"status": failed_test.status, "reason": failed_test.reason},
        "strategic on a built-in kind": step(strategic),
        "unsupported media type": {"status": unknown_type.status, "reason": unknown_type.reason},
        "patch a missing object": step(missing),
    }


def custom_patch_types(ep: Endpoint, ns: str) -> Observation:
    base = awsclusters(ns)
    ep.call("POST", base, aws_cluster("cp"))
    merge = ep.call("PATCH", f"{base}/cp", {"spec": {"additionalTags": {"a": "b"}}}, MERGE)
    json_patch = ep.call(
        "PATCH", f"{base}/cp", [{"op": "replace", "path": "/spec/additionalTags/a", "value": "c"}], JSON_PATCH
    )
    strategic = ep.call("PATCH", f"{base}/cp", {"spec": {"additionalTags": {"a": "d"}}}, STRATEGIC)
    return {
        "merge": {"status": merge.status, "tags": (merge.body.get("spec") or {}).get("additionalTags")},
        "json": {
            "status": json_patch.status,
            "tags": (json_patch.body.get("spec") or {}).get("additionalTags"),
        },
        "strategic": {"status": strategic.status, "reason": strategic.reason},
    }


def label_selectors(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    for name, env in (("a1", "a"), ("b1", "b"), ("c1", "c")):
        ep.call("POST", base, configmap(name, {"env": env}))
    ep.call("POST", base, configmap("none"))
    seen: Observation = {}
    for selector in ("env=a", "env!=a", "env in (a,b)", "env notin (a)", "!env", "env", "env=a,env=b"):
        seen[selector] = names(ep.call("GET", base, query={"labelSelector": selector}))
    bad = ep.call("GET", base, query={"labelSelector": "env in a"})
    seen["malformed"] = {"status": bad.status, "reason": bad.reason}
    bad_watch = ep.call("GET", base, query={"labelSelector": "env in a", "watch": "1", "timeoutSeconds": "1"})
    seen["malformed on a watch"] = {"status": bad_watch.status, "reason": bad_watch.reason}
    return seen


def field_selectors(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    for name in ("f1", "f2"):
        ep.call("POST", base, configmap(name))
    return {
        "metadata.name=f1": names(ep.call("GET", base, query={"fieldSelector": "metadata.name=f1"})),
        "metadata.name!=f1": names(ep.call("GET", base, query={"fieldSelector": "metadata.name!=f1"})),
        "metadata.namespace": names(
            ep.call("GET", base, query={"fieldSelector": f"metadata.namespace={ns}"})
        ),
        "a field of the content": ep.call("GET", base, query={"fieldSelector": "data.x=y"}).status,
    }


def paging(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    for i in range(5):
        ep.call("POST", base, configmap(f"page-{i}"))
    pages: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query = {"limit": "2"}
        if token:
            query["continue"] = token
        reply = ep.call("GET", base, query=query)
        meta = reply.body["metadata"]
        pages.append({"names": names(reply), "remaining": meta.get("remainingItemCount")})
        token = meta.get("continue")
        if not token:
            break
    bad = ep.call("GET", base, query={"limit": "2", "continue": "not-a-token"})
    # A limit of zero or below is no limit (capa serve answered a negative one with 500 IndexError).
    unlimited = {
        limit: {"status": reply.status, "names": names(reply) if reply.status == 200 else None}
        for limit in ("0", "-1")
        for reply in [ep.call("GET", base, query={"limit": limit})]
    }
    return {
        "pages": pages,
        "malformed continue": {"status": bad.status, "reason": bad.reason},
        "limit 0 and -1": unlimited,
    }


def watch_from_resource_version(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    created = ep.call("POST", base, configmap("w", data={"n": "0"}))
    rv = created.body["metadata"]["resourceVersion"]
    for i in (1, 2):
        ep.call("PATCH", f"{base}/w", {"data": {"n": str(i)}}, MERGE)
    ep.call("DELETE", f"{base}/w")
    events = ep.call("GET", base, query={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "2"}).body
    plain = [
        (e["type"], e["object"]["metadata"]["name"], (e["object"].get("data") or {}).get("n")) for e in events
    ]
    return {"events": plain}


def dry_run(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    created = ep.call("POST", base, configmap("dry"), query={"dryRun": "All"})
    after_create = ep.call("GET", f"{base}/dry")
    ep.call("POST", base, configmap("real", data={"a": "1"}))
    patched = ep.call("PATCH", f"{base}/real", {"data": {"a": "2"}}, MERGE, query={"dryRun": "All"})
    deleted = ep.call("DELETE", f"{base}/real", query={"dryRun": "All"})
    after = ep.call("GET", f"{base}/real")
    bad = ep.call("POST", base, configmap("bad"), query={"dryRun": "Everything"})
    bad_delete = ep.call("DELETE", f"{base}/real", {"dryRun": ["Bad"]})
    return {
        "create": step(created),
        "get after dry create": after_create.status,
        "patch": step(patched),
        "delete": {"status": deleted.status},
        "object after dry patch and delete": step(after),
        "unknown dryRun value": step(bad),
        "unknown dryRun value in DeleteOptions": step(bad_delete),
    }


def finalizers(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    doc = configmap("fin")
    doc["metadata"]["finalizers"] = ["example.com/hold"]
    ep.call("POST", base, doc)
    deleted = ep.call("DELETE", f"{base}/fin")
    held = ep.call("GET", f"{base}/fin")
    released = ep.call("PATCH", f"{base}/fin", {"metadata": {"finalizers": None}}, MERGE)
    return {
        "delete": step(deleted),
        "while held": step(held),
        "release": {"status": released.status},
        "gone": wait_gone(ep, f"{base}/fin"),
    }


def _owned(ep: Endpoint, ns: str, owner_name: str, dependent_name: str) -> None:
    base = configmaps(ns)
    owner = ep.call("POST", base, configmap(owner_name)).body
    dependent = configmap(dependent_name)
    dependent["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner_name,
            "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
    ]
    held = dependent["metadata"]
    held["finalizers"] = ["example.com/hold"]
    ep.call("POST", base, dependent)
    # The real garbage collector decides from a graph its informers build: a deletion it handles before
    # it has seen the dependent finds none. Give it a moment, as a user's objects are rarely this fresh.
    time.sleep(1.0)


def background_deletion(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    _owned(ep, ns, "bg-owner", "bg-dep")
    deleted = ep.call("DELETE", f"{base}/bg-owner", query={"propagationPolicy": "Background"})
    owner_gone = wait_gone(ep, f"{base}/bg-owner")
    dependent = marked_for_deletion(ep, f"{base}/bg-dep")
    ep.call("PATCH", f"{base}/bg-dep", {"metadata": {"finalizers": None}}, MERGE)
    return {
        "delete": {"status": deleted.status},
        "owner gone at once": owner_gone,
        "dependent marked": step(dependent),
        "dependent gone once released": wait_gone(ep, f"{base}/bg-dep"),
    }


def foreground_deletion(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    _owned(ep, ns, "fg-owner", "fg-dep")
    deleted = ep.call("DELETE", f"{base}/fg-owner", query={"propagationPolicy": "Foreground"})
    owner = ep.call("GET", f"{base}/fg-owner")
    dependent = marked_for_deletion(ep, f"{base}/fg-dep")
    ep.call("PATCH", f"{base}/fg-dep", {"metadata": {"finalizers": None}}, MERGE)
    return {
        "delete": step(deleted),
        "owner waits": step(owner),
        "dependent marked": step(dependent),
        "owner gone after its dependent": wait_gone(ep, f"{base}/fg-owner"),
    }


def error_bodies(ep: Endpoint, ns: str) -> Observation:
    base = configmaps(ns)
    return {
        "not found": step(ep.call("GET", f"{base}/absent")),
        "invalid name": step(ep.call("POST", base, configmap("Not_A_Name"))),
        "malformed JSON": {"status": ep.call("POST", base, b"{not json").status},
        "name mismatch": step(ep.call("PUT", f"{base}/x", configmap("y"))),
        "unknown resource": {"status": ep.call("GET", f"/api/v1/namespaces/{ns}/nothings").status},
        "invalid custom object": step(
            ep.call("POST", awsclusters(ns), {**aws_cluster("bad"), "spec": {"region": 5}})
        ),
    }


def field_validation(ep: Endpoint, ns: str) -> Observation:
    seen: Observation = {}
    for mode in ("Strict", "Warn", "Ignore", None, "strict"):
        doc = aws_cluster(f"fv-{(mode or 'none').lower()}")
        doc["spec"]["surprise"] = True
        query = {"fieldValidation": mode} if mode else None
        reply = ep.call("POST", awsclusters(ns), doc, query=query)
        stored = ep.call("GET", f"{awsclusters(ns)}/{doc['metadata']['name']}")
        seen[f"create with {mode}"] = {
            "status": reply.status,
            "reason": reply.reason,
            "warning": reply.headers.get("Warning"),
            "stored with the field": "surprise" in ((stored.body or {}).get("spec") or {}),
        }
    patch = ep.call(
        "PATCH",
        f"{awsclusters(ns)}/fv-warn",
        {"spec": {"other": 1}},
        MERGE,
        query={"fieldValidation": "Strict"},
    )
    seen["strict patch"] = {"status": patch.status, "reason": patch.reason}
    return seen


WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.conformance.example.com"},
    "spec": {
        "group": "conformance.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Colour", "type": "string", "jsonPath": ".spec.colour", "priority": 1},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "colour": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                },
                            },
                            "status": {"type": "object", "properties": {"seen": {"type": "boolean"}}},
                        },
                    }
                },
            }
        ],
    },
}


def client_defined_kind(ep: Endpoint, ns: str) -> Observation:
    """A CRD a client applies (once per server: the first run creates it) is served with its schema."""
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    ep.call("POST", crd_path, WIDGETS)

    def established() -> bool:
        conditions = (
            ep.call("GET", f"{crd_path}/widgets.conformance.example.com").body.get("status") or {}
        ).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    eventually(established, "the Widget CRD Established", timeout=60, interval=0.1)
    base = f"/apis/conformance.example.com/v1/namespaces/{ns}/widgets"
    created = ep.call(
        "POST",
        base,
        {
            "apiVersion": "conformance.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 2, "extra": 1},
        },
    )
    invalid = ep.call(
        "POST",
        base,
        {
            "apiVersion": "conformance.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w2"},
            "spec": {"size": 0, "colour": "green"},
        },
    )
    missing = ep.call(
        "POST",
        base,
        {
            "apiVersion": "conformance.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w3"},
            "spec": {},
        },
    )
    table = ep.call("GET", base, accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    columns = [(c["name"], c.get("priority", 0)) for c in (table.body or {}).get("columnDefinitions", [])]
    rows = [r["cells"][:3] for r in (table.body or {}).get("rows", [])]
    resources = ep.call("GET", "/apis/conformance.example.com/v1").body
    return {
        "create (unknown field pruned, default applied)": step(created),
        "invalid values": step(invalid),
        "missing required field": step(missing),
        "table columns": columns,
        "table rows": rows,
        "discovery": sorted(
            (r["name"], r.get("namespaced"), tuple(r.get("shortNames") or ())) for r in resources["resources"]
        ),
    }


def system_namespaces(ep: Endpoint, ns: str) -> Observation:
    listed = ep.call("GET", "/api/v1/namespaces").body["items"]
    return {
        "system namespaces": sorted(
            (n["metadata"]["name"], (n.get("status") or {}).get("phase"))
            for n in listed
            if n["metadata"]["name"] in ("default", "kube-system", "kube-public", "kube-node-lease")
        )
    }


def openapi_custom_kinds(ep: Endpoint, ns: str) -> Observation:
    """What ``kubectl explain`` reads for a custom kind: its schema in the group-version's OpenAPI v3
    document (a CRD's schema is published inline, so every object field is an ``Object``)."""
    document = ep.call("GET", "/openapi/v3/apis/infrastructure.cluster.x-k8s.io/v1beta2").body
    schemas = document["components"]["schemas"]
    seen: Observation = {}
    for kind in ("AWSCluster", "AWSMachine"):
        schema = schemas.get(f"io.x-k8s.cluster.infrastructure.v1beta2.{kind}") or {}
        properties = schema.get("properties") or {}
        seen[kind] = {
            "group-version-kind": schema.get("x-kubernetes-group-version-kind"),
            "required": schema.get("required"),
            "spec": properties.get("spec"),
            "status": properties.get("status"),
            "metadata": properties.get("metadata", {}).get("allOf"),
        }
    return seen


def discovery_categories(ep: Endpoint, ns: str) -> Observation:
    """The categories discovery gives each kind (``kubectl get all`` and ``kubectl get cluster-api`` list
    the kinds of a category)."""
    seen: Observation = {}
    for group_version, plural in (
        ("api/v1", "services"),
        ("api/v1", "configmaps"),
        ("apis/apps/v1", "deployments"),
        ("apis/apps/v1", "daemonsets"),
        ("apis/infrastructure.cluster.x-k8s.io/v1beta2", "awsclusters"),
        ("apis/cluster.x-k8s.io/v1beta1", "machines"),
    ):
        resources = ep.call("GET", f"/{group_version}").body.get("resources", [])
        found = next((r for r in resources if r["name"] == plural), {})
        seen[f"{group_version}/{plural}"] = sorted(found.get("categories") or [])
    return seen


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def table_view(reply: Reply) -> dict[str, Any]:
    """A Table as ``kubectl get`` prints it: the columns' names and priorities, each row's cells (Age
    left out: it depends on the moment)."""
    body = reply.body or {}
    columns = body.get("columnDefinitions") or []
    ages = {i for i, c in enumerate(columns) if c.get("name") == "Age"}
    return {
        "status": reply.status,
        "columns": [(c.get("name"), c.get("priority", 0)) for c in columns],
        "rows": [
            [cell for i, cell in enumerate(row.get("cells", [])) if i not in ages]
            for row in body.get("rows") or []
        ],
    }


def builtin_tables(ep: Endpoint, ns: str) -> Observation:
    """The Tables ``kubectl get`` prints for Kubernetes' own kinds: ConfigMaps (DATA counts data and
    binaryData), Secrets (TYPE, DATA)."""
    ep.call("POST", configmaps(ns), configmap("two", data={"a": "1", "b": "2"}, binaryData={"c": "AA=="}))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}}
    ep.call("POST", f"/api/v1/namespaces/{ns}/secrets", secret)
    return {
        "configmaps": table_view(ep.call("GET", configmaps(ns), accept=TABLE)),
        "secrets": table_view(ep.call("GET", f"/api/v1/namespaces/{ns}/secrets", accept=TABLE)),
    }


def namespace_as_created(ep: Endpoint, ns: str) -> Observation:
    """A new Namespace as clients read it back: the API server labels it with its name
    (``kubernetes.io/metadata.name``, what a namespaceSelector matches on) and its phase is Active."""
    name = f"{ns}-made"
    created = ep.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    got = ep.call("GET", f"/api/v1/namespaces/{name}")
    ep.call("DELETE", f"/api/v1/namespaces/{name}")
    return {
        "create": created.status,
        "labels": (got.body.get("metadata") or {}).get("labels"),
        "phase": (got.body.get("status") or {}).get("phase"),
    }


def oversized_body(ep: Endpoint, ns: str) -> Observation:
    """A request body over the API server's limit (3 MiB) is refused whole, with a Status, and stores
    nothing (capa serve read up to 8 MiB and answered a larger body with 500)."""
    big = configmap("big", data={"blob": "x" * (3 * 1024 * 1024 + 1024)})
    reply = ep.call("POST", configmaps(ns), big)
    after = ep.call("GET", f"{configmaps(ns)}/big")
    return {
        "status": reply.status,
        "reason": reply.reason,
        "message": reply.body.get("message") if isinstance(reply.body, dict) else None,
        "stored": after.status,
    }


def malformed_bodies(ep: Endpoint, ns: str) -> Observation:
    """Bodies the API server's decoder refuses, 400 BadRequest each, and nothing written: capa serve
    answered a deeply nested one 500, stored an out-of-range metadata integer, and deleted the object for
    DeleteOptions with a wrongly typed field."""
    base = configmaps(ns)
    ep.call("POST", base, configmap("kept"))
    deep = ep.call("POST", base, b'{"metadata":{"name":"deep"},"x":' + b"[" * 20000 + b"]" * 20000 + b"}")
    huge = ep.call("POST", base, b'{"metadata":{"name":"huge","generation":99999999999999999999999999}}')
    bad_delete = ep.call("DELETE", f"{base}/kept", b'{"gracePeriodSeconds":"soon"}')
    return {
        "deeply nested": (deep.status, deep.reason),
        "metadata integer out of range": (huge.status, huge.reason),
        "DeleteOptions field of the wrong type": (bad_delete.status, bad_delete.reason),
        "stored afterwards": sorted(names(ep.call("GET", base))),
    }


def refusal(reply: Reply) -> dict[str, Any]:
    """A reply as a client branches on a refusal: the status, and the Status as :func:`status_view`."""
    body = reply.body if isinstance(reply.body, dict) and reply.body.get("kind") == "Status" else None
    return {"status": reply.status, "Status": status_view(body) if body is not None else None}


def list_and_watch_parameters(ep: Endpoint, ns: str) -> Observation:
    """Query parameters of a list or watch that do not parse (400 BadRequest) or do not go together (422
    Invalid, ListOptions naming the field); capa serve accepted each (timeoutSeconds=1.5 as a number) and
    ignored resourceVersionMatch and sendInitialEvents. ``watch=no`` is a watch, ``watch=false`` a list, as
    the API server converts a boolean parameter."""
    base = configmaps(ns)
    ep.call("POST", base, configmap("lw"))
    cases: dict[str, dict[str, str]] = {
        "list: malformed resourceVersion": {"resourceVersion": "abc"},
        "list: negative resourceVersion": {"resourceVersion": "-1"},
        "list: malformed limit": {"limit": "ten"},
        "watch: malformed timeoutSeconds": {"watch": "1", "timeoutSeconds": "soon"},
        "watch: fractional timeoutSeconds": {"watch": "1", "timeoutSeconds": "1.5"},
        "list: resourceVersionMatch without resourceVersion": {"resourceVersionMatch": "NotOlderThan"},
        "list: unknown resourceVersionMatch": {"resourceVersionMatch": "Newest", "resourceVersion": "1"},
        "list: Exact at resourceVersion 0": {"resourceVersionMatch": "Exact", "resourceVersion": "0"},
        "list: sendInitialEvents": {"sendInitialEvents": "true"},
        "watch: resourceVersionMatch without sendInitialEvents": {
            "watch": "1",
            "resourceVersionMatch": "NotOlderThan",
            "resourceVersion": "1",
        },
        "watch: sendInitialEvents without NotOlderThan": {"watch": "1", "sendInitialEvents": "true"},
        "watch: Exact": {"watch": "1", "resourceVersionMatch": "Exact", "sendInitialEvents": "false"},
    }
    seen: Observation = {name: refusal(ep.call("GET", base, query=query)) for name, query in cases.items()}
    as_list = ep.call("GET", base, query={"watch": "false"})
    seen["watch=false is a list"] = (as_list.status, (as_list.body or {}).get("kind"))
    as_watch = ep.call("GET", base, query={"watch": "no", "timeoutSeconds": "1"})
    seen["watch=no is a watch"] = (
        as_watch.status,
        isinstance(as_watch.body, str) and '"ADDED"' in as_watch.body,
    )
    initial = ep.call(
        "GET",
        base,
        query={
            "watch": "1",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "2",
        },
    )
    events = [
        (e["type"], e["object"]["metadata"].get("name") or e["object"]["metadata"].get("annotations"))
        for e in initial.body
    ]
    # Up to the bookmark that ends the initial events (later ones come as each server's interval says).
    ends = [i for i, (kind, _) in enumerate(events) if kind == "BOOKMARK"]
    seen["watch with sendInitialEvents"] = events[: ends[0] + 1] if ends else events
    return seen


def malformed_resource_version(ep: Endpoint, ns: str) -> Observation:
    """A resourceVersion that is no number: a list is answered 400 on both servers; kube-apiserver answers
    a get or a watch 500 InternalError, capa serve 400 BadRequest (it answered the watch 200 and ended it
    silently, and the get with the object): a known difference, the client's error being no server error."""
    base = configmaps(ns)
    ep.call("POST", base, configmap("rv"))
    return {
        "list": refusal(ep.call("GET", base, query={"resourceVersion": "abc"})),
        "get": refusal(ep.call("GET", f"{base}/rv", query={"resourceVersion": "abc"})),
        "watch": refusal(
            ep.call("GET", base, query={"watch": "1", "resourceVersion": "abc", "timeoutSeconds": "2"})
        ),
    }


FUTURE = "999999999"


def future_resource_version(ep: Endpoint, ns: str) -> Observation:
    """A resourceVersion the server has not reached: a get and a list wait for it a moment, then are
    answered 504 Timeout with the cause ResourceVersionTooLarge; a watch from it stays open and sends
    nothing, no bookmark either (capa serve answered the get and list with the current state, and the
    watch with bookmarks at the future version)."""
    base = configmaps(ns)
    ep.call("POST", base, configmap("future"))
    seen: Observation = {}
    for name, path, query in (
        ("get", f"{base}/future", {"resourceVersion": FUTURE}),
        ("list", base, {"resourceVersion": FUTURE}),
        ("list NotOlderThan", base, {"resourceVersion": FUTURE, "resourceVersionMatch": "NotOlderThan"}),
    ):
        reply = ep.call("GET", path, query=query)
        body = reply.body if isinstance(reply.body, dict) else {}
        seen[name] = {
            **refusal(reply),
            "message": str(body.get("message", "")).split(",")[0],
            "retryAfterSeconds": (body.get("details") or {}).get("retryAfterSeconds"),
        }
    watch = ep.call(
        "GET",
        base,
        query={"watch": "1", "resourceVersion": FUTURE, "allowWatchBookmarks": "true", "timeoutSeconds": "2"},
    )
    seen["watch"] = {"status": watch.status, "events": watch.body}
    return seen


APPLY = "application/apply-patch+yaml"
MALFORMED_PATCHES: dict[str, tuple[str, bytes]] = {
    "json: unknown op": (JSON_PATCH, b'[{"op":"bogus","path":"/data/a"}]'),
    "json: remove a missing key": (JSON_PATCH, b'[{"op":"remove","path":"/data/zzz"}]'),
    "json: op without a path": (JSON_PATCH, b'[{"op":"add"}]'),
    "json: move from a missing path": (JSON_PATCH, b'[{"op":"move","from":"/nope","path":"/data/b"}]'),
    "json: through a string": (JSON_PATCH, b'[{"op":"replace","path":"/data/a/b/c","value":1}]'),
    "json: an object, not an array": (JSON_PATCH, b'{"op":"add"}'),
    "json: operations that are numbers": (JSON_PATCH, b"[1,2]"),
    "json: not JSON": (JSON_PATCH, b"not json"),
    "merge: an array": (MERGE, b"[1]"),
    "merge: a string": (MERGE, b'"str"'),
    "merge: null": (MERGE, b"null"),
    "merge: not JSON": (MERGE, b"not json"),
    "strategic: retainKeys not a list": (STRATEGIC, b'{"$retainKeys":5}'),
    "strategic: an array": (STRATEGIC, b"[1]"),
    "apply: a YAML list": (APPLY, b"- a"),
    "apply: a YAML scalar": (APPLY, b'"scalar"'),
    "apply: broken YAML": (APPLY, b"a: [b"),
    "apply: empty": (APPLY, b""),
}
"""Patches that cannot apply, with the code kube-apiserver answers each (4xx, as capa serve)."""

SERVER_ERROR_PATCHES: dict[str, tuple[str, bytes]] = {
    "strategic: unknown $patch": (STRATEGIC, b'{"$patch":"bogus"}'),
    "strategic: $setElementOrder not a list": (STRATEGIC, b'{"metadata":{"$setElementOrder/finalizers":5}}'),
    "apply: a field of the wrong type": (
        APPLY,
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pp"},"data":{"a":5}}',
    ),
}
"""Patches kube-apiserver answers 500 InternalError, capa serve 400 or 422."""


def _patched(ep: Endpoint, ns: str, patches: dict[str, tuple[str, bytes]]) -> Observation:
    base = configmaps(ns)
    ep.call("POST", base, configmap("pp", data={"a": "1"}))
    seen: Observation = {
        name: refusal(ep.call("PATCH", f"{base}/pp", body, media, query={"fieldManager": "conformance"}))
        for name, (media, body) in patches.items()
    }
    seen["stored afterwards"] = step(ep.call("GET", f"{base}/pp"))
    return seen


def malformed_patches(ep: Endpoint, ns: str) -> Observation:
    """JSON patches with bad operations or paths, merge patches that are no object, strategic merge patches
    with a malformed directive, apply patches whose YAML is no object: each a 4xx Status, nothing written
    (capa serve answered operations that are numbers 422, not 400, and applied ``$retainKeys: 5``)."""
    return _patched(ep, ns, MALFORMED_PATCHES)


def patches_answered_500_by_kube_apiserver(ep: Endpoint, ns: str) -> Observation:
    """Patches kube-apiserver answers 500 InternalError: capa serve answers 400 BadRequest (a malformed
    strategic merge directive) or 422 Invalid (an apply patch with a field of the wrong type), the client's
    error being no server error; nothing is written on either."""
    return _patched(ep, ns, SERVER_ERROR_PATCHES)


def _outcome(reply: Reply) -> dict[str, Any]:
    """A write as a client branches on it: the status, and a refusal's Status as :func:`status_view`."""
    return refusal(reply) if reply.status >= 400 else {"status": reply.status}


def object_size_limits(ep: Endpoint, ns: str) -> Observation:
    """The limits a client observes on a write, 422 Invalid naming the field: annotations over 256 KiB in
    all, a label value or key name over 63 characters, an annotation key that is no qualified name, a name
    over 253 characters (a Namespace's or a Service's: a DNS label, no dots, at most 63), a ConfigMap's data
    or a Secret's data over 1 MiB (kube-apiserver names the whole ConfigMap, ``[]``). capa serve stored the
    annotations, the ConfigMaps, the Secret, the dotted Namespace and Service."""
    base = configmaps(ns)
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    mib = 1024 * 1024
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "annotations at 256 KiB": (
            base,
            configmap("ann-at", metadata_extra={"annotations": {"a": "x" * (262144 - 1)}}),
        ),
        "annotations over 256 KiB": (
            base,
            configmap("ann-over", metadata_extra={"annotations": {"a": "x" * 262144}}),
        ),
        "annotation key not a qualified name": (
            base,
            configmap("ann-key", metadata_extra={"annotations": {"a b": "x"}}),
        ),
        "label value of 64": (base, configmap("lab-value", {"a": "x" * 64})),
        "label key name of 64": (base, configmap("lab-key", {"x" * 64: "a"})),
        "name of 253": (base, configmap("a" * 253)),
        "name of 254": (base, configmap("a" * 254)),
        "ConfigMap data at 1 MiB": (base, configmap("data-at", data={"a": "x" * mib})),
        "ConfigMap data over 1 MiB": (base, configmap("data-over", data={"a": "x" * (mib + 1)})),
        "ConfigMap of 2 MiB": (base, configmap("data-2mib", data={"a": "x" * mib, "b": "y" * mib})),
        "ConfigMap data and binaryData over 1 MiB": (
            base,
            configmap("data-binary", data={"a": "x" * (mib // 2)}, binaryData={"b": "eXl5" * (mib // 6 + 1)}),
        ),
        "Secret data over 1 MiB": (
            secrets,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "big"},
                "stringData": {"a": "x" * (mib + 1)},
            },
        ),
    }
    service = {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]}}
    cases["Namespace name with a dot"] = ("/api/v1/namespaces", {"metadata": {"name": f"{ns}.dotted"}})
    cases["Namespace name of 64"] = ("/api/v1/namespaces", {"metadata": {"name": "n" * 64}})
    cases["Service name with a dot"] = (
        f"/api/v1/namespaces/{ns}/services",
        {**service, "metadata": {"name": "a.b"}},
    )
    return {name: _outcome(ep.call("POST", path, body)) for name, (path, body) in cases.items()}


def object_over_the_storage_limit(ep: Endpoint, ns: str) -> Observation:
    """An object within every field's limit but larger than etcd stores (1.5 MiB): a ConfigMap of 1 MB of
    data, 256 KiB of annotations and 4,000 labels. kube-apiserver answers etcd's refusal 500; capa serve
    (which stored it) answers 413 RequestEntityTooLarge with the same message: a known difference."""
    labels = {f"l{i:05d}": "v" * 63 for i in range(4000)}
    doc = configmap("huge", labels, data={"a": "x" * 1_040_000})
    doc["metadata"]["annotations"] = {"a": "y" * 262_000}
    reply = ep.call("POST", configmaps(ns), doc)
    body = reply.body if isinstance(reply.body, dict) else {}
    return {
        "create": _outcome(reply),
        "message": body.get("message"),
        "stored": ep.call("GET", f"{configmaps(ns)}/huge").status,
    }


SCENARIOS: dict[str, Scenario] = {
    "CRUD of a built-in kind (ConfigMap)": crud_builtin,
    "CRUD of a custom kind (AWSCluster)": crud_custom,
    "status subresource and generation": status_subresource,
    "patch types on a built-in kind": patch_types,
    "patch types on a custom kind": custom_patch_types,
    "malformed patches": malformed_patches,
    "patches kube-apiserver answers 500": patches_answered_500_by_kube_apiserver,
    "label selectors": label_selectors,
    "field selectors": field_selectors,
    "paging with limit and continue": paging,
    "a body over the request size limit": oversized_body,
    "malformed bodies": malformed_bodies,
    "object size limits": object_size_limits,
    "an object over the storage limit": object_over_the_storage_limit,
    "watch from a resourceVersion": watch_from_resource_version,
    "list and watch parameters": list_and_watch_parameters,
    "a malformed resourceVersion": malformed_resource_version,
    "a resourceVersion from the future": future_resource_version,
    "dryRun": dry_run,
    "finalizers": finalizers,
    "background deletion": background_deletion,
    "foreground deletion": foreground_deletion,
    "error Status bodies": error_bodies,
    "fieldValidation": field_validation,
    "a kind defined by a client's CRD": client_defined_kind,
    "system namespaces": system_namespaces,
    "OpenAPI v3 schemas of custom kinds": openapi_custom_kinds,
    "discovery categories": discovery_categories,
    "Tables of built-in kinds": builtin_tables,
    "a Namespace as created": namespace_as_created,
}
