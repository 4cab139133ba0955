"""RBAC's escalation prevention: a user may write a role or binding only if it grants nothing the user does
not hold, as the API server refuses it.

Writing a Role or ClusterRole is allowed to members of ``system:masters``, to a user the authorizer allows
the ``escalate`` verb on it, and to a user whose own rules (there: the namespace's and the cluster's for a
Role, the cluster's for a ClusterRole) cover every rule it has; an ``aggregationRule`` needs everything
(``*`` on everything). Writing a RoleBinding or ClusterRoleBinding is allowed to members of
``system:masters``, to a user the authorizer allows the ``bind`` verb on the role it refers to, and to a
user whose rules cover the rules of that role (a role that does not exist is 404 NotFound). Anything else
is refused 403 ``Forbidden`` listing the rules not held, worded as the API server words it. A write that
changes only owner references or finalizers (the garbage collector's) is not checked.

:class:`GuardedStore` checks the writes made on behalf of the user :func:`acting_as` set for the request
being served; writes made for nobody (the server's own: the bootstrap policy, the foreground collector)
pass unchecked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from capa_py.api.meta import KubeObject
from capa_py.api.workloads import ClusterRole, ClusterRoleBinding, Role, RoleBinding
from capa_py.apiserver.rbac import SYSTEM_MASTERS, Authorizer, rbac_authorizers
from capa_py.apiserver.request_info import RequestInfo
from capa_py.apiserver.reviews import User, authorize
from capa_py.apiserver.status import ApiError
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectList, ObjectStore, Propagation, WatchEvent

T = TypeVar("T", bound=KubeObject)
RBAC_GROUP = "rbac.authorization.k8s.io"
FULL_AUTHORITY = (
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
)

_acting_user: ContextVar[User | None] = ContextVar("capa_acting_user", default=None)


def acting_as(user: User) -> None:
    """Record that the writes of the request being served (this task and the threads it starts) are
    ``user``'s."""
    _acting_user.set(user)


# -- covering rules -----------------------------------------------------------------------------------------
def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def breakdown(rule: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    """One rule per group, resource, verb and resource name, and per non-resource URL and verb."""
    parts: list[dict[str, list[str]]] = []
    names = _strings(rule.get("resourceNames"))
    for group in _strings(rule.get("apiGroups")):
        for resource in _strings(rule.get("resources")):
            for verb in _strings(rule.get("verbs")):
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                parts.extend({**base, "resourceNames": [name]} for name in names) if names else parts.append(
                    base
                )
    for url in _strings(rule.get("nonResourceURLs")):
        for verb in _strings(rule.get("verbs")):
            parts.append({"nonResourceURLs": [url], "verbs": [verb]})
    return parts


def _resources_cover(held: list[str], wanted: list[str]) -> bool:
    if "*" in held or all(r in held for r in wanted):
        return True
    for resource in wanted:
        if resource in held:
            continue
        if "/" not in resource or "*/" + resource.split("/", 1)[1] not in held:
            return False
    return True


def _urls_cover(held: list[str], wanted: list[str]) -> bool:
    return all(any(h == w or (h.endswith("*") and w.startswith(h[:-1])) for h in held) for w in wanted)


def rule_covers(owner: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    """Whether ``owner`` grants everything ``rule`` does."""
    owner_verbs, verbs = _strings(owner.get("verbs")), _strings(rule.get("verbs"))
    owner_groups, groups = _strings(owner.get("apiGroups")), _strings(rule.get("apiGroups"))
    owner_names, names = _strings(owner.get("resourceNames")), _strings(rule.get("resourceNames"))
    return (
        ("*" in owner_verbs or all(v in owner_verbs for v in verbs))
        and ("*" in owner_groups or all(g in owner_groups for g in groups))
        and _resources_cover(_strings(owner.get("resources")), _strings(rule.get("resources")))
        and _urls_cover(_strings(owner.get("nonResourceURLs")), _strings(rule.get("nonResourceURLs")))
        and (not owner_names if not names else (not owner_names or all(n in owner_names for n in names)))
    )


def uncovered(
    owner_rules: Sequence[Mapping[str, Any]], rules: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The parts of ``rules`` no rule of ``owner_rules`` covers."""
    return [
        part
        for rule in rules
        for part in breakdown(rule)
        if not any(rule_covers(owner, part) for owner in owner_rules)
    ]


def _compact(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rules that differ only in their verb merged into one (one group, one resource, one name at most)."""
    compacted: list[dict[str, Any]] = []
    simple: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for rule in rules:
        names = rule.get("resourceNames") or []
        is_simple = (
            len(names) <= 1
            and not rule.get("nonResourceURLs")
            and len(rule.get("apiGroups") or []) == 1
            and len(rule.get("resources") or []) == 1
        )
        if not is_simple:
            compacted.append(rule)
            continue
        key = (rule["apiGroups"][0], rule["resources"][0], names[0] if names else None)
        if key in simple:
            simple[key]["verbs"] = [*simple[key]["verbs"], *rule["verbs"]]
        else:
            simple[key] = {k: list(v) for k, v in rule.items()}
    return compacted + list(simple.values())


def _go_strings(values: list[str]) -> str:
    """A list of strings as Go's ``%q`` prints one: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def compact_string(rule: Mapping[str, Any]) -> str:
    fields = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            fields.append(f"{label}:{_go_strings(list(rule[key]))}")
    return "{" + ", ".join(fields) + "}"


def not_held(user: User, missing: list[dict[str, Any]], errors: list[str]) -> str:
    descriptions = sorted({compact_string(rule) for rule in _compact(missing)})
    message = (
        f'user "{user.username}" (groups={_go_strings(list(user.groups))}) is attempting to grant RBAC '
        "permissions not currently held:\n" + "\n".join(descriptions)
    )
    if errors:
        aggregate = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        message += f"; resolution errors: [{aggregate}]"
    return message


# -- the checks ---------------------------------------------------------------------------------------------
class EscalationCheck:
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def _allowed(self, user: User, verb: str, resource: str, name: str, namespace: str) -> bool:
        info = RequestInfo(
            True,
            verb,
            api_group=RBAC_GROUP,
            api_version="v1",
            namespace=namespace,
            resource=resource,
            name=name,
        )
        return authorize(user, info, self.authorizer)[0]

    def _held(self, user: User, namespace: str) -> tuple[list[Mapping[str, Any]], list[str]]:
        errors: list[str] = []
        held = [
            rule
            for rbac in rbac_authorizers(self.authorizer)
            for _, rule in rbac.rules_for(user, namespace, errors)
        ]
        return held, errors

    def _refuse(self, resource: str, name: str, message: str) -> ApiError:
        return ApiError(
            403,
            f'{resource}.{RBAC_GROUP} "{name}" is forbidden: {message}',
            "Forbidden",
            name=name,
            kind=resource,
            group=RBAC_GROUP,
        )

    def _confirm(
        self, user: User, resource: str, name: str, namespace: str, rules: Sequence[Mapping[str, Any]]
    ) -> None:
        held, errors = self._held(user, namespace)
        missing = uncovered(held, rules)
        if missing:
            raise self._refuse(resource, name, not_held(user, missing, errors))

    def check(self, user: User, obj: KubeObject) -> None:
        """Raise 403 when ``user`` may not write ``obj`` (a role or binding) for what it grants."""
        if SYSTEM_MASTERS in user.groups:
            return
        name, namespace = obj.metadata.name, obj.metadata.namespace or ""
        if isinstance(obj, Role | ClusterRole):
            resource = "roles" if isinstance(obj, Role) else "clusterroles"
            if self._allowed(user, "escalate", resource, name, namespace):
                return
            self._confirm(user, resource, name, namespace, obj.rules)
            if isinstance(obj, ClusterRole) and obj.aggregation_rule:
                held, _ = self._held(user, "")
                if uncovered(held, FULL_AUTHORITY):
                    raise self._refuse(
                        resource, name, "must have cluster-admin privileges to use the aggregationRule"
                    )
            return
        if isinstance(obj, RoleBinding | ClusterRoleBinding):
            resource = "rolebindings" if isinstance(obj, RoleBinding) else "clusterrolebindings"
            ref = obj.role_ref
            ref_kind, ref_name = str(ref.get("kind", "")), str(ref.get("name", ""))
            ref_resource = "roles" if ref_kind == "Role" else "clusterroles"
            if self._allowed(user, "bind", ref_resource, ref_name, namespace):
                return
            rules = self._role_rules(ref_kind, ref_name, namespace)
            if (
                rules is None
            ):  # answered as the API server answers it: the binding's resource, the role's name
                raise ApiError(
                    404,
                    f'{resource}.{RBAC_GROUP} "{ref_name}" not found',
                    name=ref_name,
                    kind=resource,
                    group=RBAC_GROUP,
                )
            self._confirm(user, resource, name, namespace, rules)

    def _role_rules(self, kind: str, name: str, namespace: str) -> list[Mapping[str, Any]] | None:
        for rbac in rbac_authorizers(self.authorizer):
            errors: list[str] = []
            rules = rbac.role_rules({"kind": kind, "name": name}, namespace, errors)
            if rules is not None:
                return rules
        return None


_GC_FIELDS = ("ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation")


def _only_gc_fields_changed(old: KubeObject, new: KubeObject) -> bool:
    def comparable(obj: KubeObject) -> dict[str, Any]:
        doc = obj.to_dict()
        doc["metadata"] = {k: v for k, v in doc.get("metadata", {}).items() if k not in _GC_FIELDS}
        return doc

    return comparable(old) == comparable(new)


_GUARDED = (Role, ClusterRole, RoleBinding, ClusterRoleBinding)


class GuardedStore:
    """``store`` with every role and binding written on a user's behalf checked for escalation first."""

    def __init__(self, store: ObjectStore, authorizer: Authorizer) -> None:
        self.store = store
        self.escalation = EscalationCheck(authorizer)

    def __getattr__(self, name: str) -> Any:  # what else the store offers (its current resourceVersion)
        return getattr(self.store, name)

    @property
    def uid(self) -> str:
        return self.store.uid

    def _check(self, obj: KubeObject, updating: bool) -> None:
        user = _acting_user.get()
        if user is None or not isinstance(obj, _GUARDED):
            return
        if updating:
            try:
                old = self.store.get(type(obj), obj.metadata.name, obj.metadata.namespace)
            except NotFound:
                old = None
            if old is not None and _only_gc_fields_changed(old, obj):
                return
        self.escalation.check(user, obj)

    def create(self, obj: T) -> T:
        self._check(obj, updating=False)
        return self.store.create(obj)

    def update(self, obj: T) -> T:
        self._check(obj, updating=True)
        return self.store.update(obj)

    def update_status(self, obj: T) -> T:
        return self.store.update_status(obj)

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        return self.store.get(kind, name, namespace)

    def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[T]:
        return self.store.list(kind, namespace, label_selector, field_selector)

    def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        resource_version: str | None = None,
    ) -> T | None:
        return self.store.delete(kind, name, namespace, propagation, resource_version)

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[T]]:
        return self.store.watch(kind, namespace, resource_version, label_selector, timeout, stop)

    def close(self) -> None:
        self.store.close()


def guarded(store: ObjectStore, authorizer: Authorizer) -> ObjectStore:
    """``store`` as the server writes to it: roles and bindings checked for escalation."""
    return GuardedStore(store, authorizer)
