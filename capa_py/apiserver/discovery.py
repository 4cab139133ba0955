"""Discovery documents: what ``kubectl`` reads to map resource names onto paths."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from capa_py import __version__
from capa_py.api.meta import KubeObject
from capa_py.api.registry import KindRegistry
from capa_py.apiserver import reviews

SERVED_KUBERNETES = ("1", "31")
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


def group_version(model: type[KubeObject]) -> tuple[str, str]:
    """``("infrastructure.cluster.x-k8s.io", "v1beta2")``; the core group is ``""``."""
    group, _, version = model.API_VERSION.rpartition("/")
    return group, version


IN_ALL = frozenset(
    {
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("", "services"),
        ("apps", "daemonsets"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("batch", "cronjobs"),
        ("batch", "jobs"),
    }
)
"""Kubernetes' kinds in the category ``all`` (what ``kubectl get all`` lists), by group and plural."""


def categories(model: type[KubeObject]) -> list[str]:
    group, _ = group_version(model)
    if (group, model.PLURAL) in IN_ALL:
        return ["all"]
    if group == "tinkerbell.org":
        return ["tinkerbell"]
    return ["cluster-api"] if group.endswith("cluster.x-k8s.io") else []


def version_info() -> dict[str, str]:
    major, minor = SERVED_KUBERNETES
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0+capa-py.{__version__}",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "capa-py",
        "platform": "linux/amd64",
    }


def by_group(registry: KindRegistry) -> dict[str, dict[str, list[type[KubeObject]]]]:
    groups: dict[str, dict[str, list[type[KubeObject]]]] = defaultdict(lambda: defaultdict(list))
    for model in registry.kinds():
        group, version = group_version(model)
        groups[group][version].append(model)
    return groups


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def api_group_list(registry: KindRegistry) -> dict[str, Any]:
    """Every group of the registry, and the groups of the reviews (``authorization.k8s.io``...)."""
    served: dict[str, set[str]] = {g: set(v) for g, v in by_group(registry).items()}
    for review_group, review_versions in reviews.groups().items():
        served.setdefault(review_group, set()).update(review_versions)
    groups = []
    for group, versions in sorted(served.items()):
        if not group:
            continue
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted(versions)]
        groups.append({"name": group, "versions": listed, "preferredVersion": listed[-1]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: KindRegistry, group: str) -> dict[str, Any] | None:
    for listed in api_group_list(registry)["groups"]:
        if listed["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **listed}
    return None


def resource_list(registry: KindRegistry, group: str, version: str) -> dict[str, Any] | None:
    models = by_group(registry).get(group, {}).get(version)
    if not models:
        return reviews.resource_list(group, version)
    resources: list[dict[str, Any]] = []
    for model in sorted(models, key=lambda m: m.PLURAL):
        entry: dict[str, Any] = {
            "name": model.PLURAL,
            "singularName": model.KIND.lower(),
            "namespaced": model.NAMESPACED,
            "kind": model.KIND,
            "verbs": VERBS,
        }
        if model.SHORT_NAMES:
            entry["shortNames"] = list(model.SHORT_NAMES)
        if categories(model):
            entry["categories"] = categories(model)
        resources.append(entry)
        if model.HAS_STATUS:
            resources.append(
                {
                    "name": f"{model.PLURAL}/status",
                    "singularName": "",
                    "namespaced": model.NAMESPACED,
                    "kind": model.KIND,
                    "verbs": STATUS_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
