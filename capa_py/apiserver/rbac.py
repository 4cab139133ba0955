"""Role-based access control over the stored ``rbac.authorization.k8s.io/v1`` objects, as the API server's
RBAC authorizer decides.

A user may do what a rule of a role bound to it allows. The cluster's bindings (ClusterRoleBindings, to a
ClusterRole) apply everywhere; a namespace's RoleBindings (to a Role of that namespace or to a ClusterRole)
apply to requests in that namespace. A binding applies to a ``User`` subject by name, a ``Group`` subject
by membership and a ``ServiceAccount`` subject to the user ``system:serviceaccount:NAMESPACE:NAME`` (a
RoleBinding's subject without a namespace meaning its own). A rule allows a resource request when its
verbs, API groups and resources match (``*`` matches anything, ``resource/subresource`` a subresource and
``*/subresource`` that subresource of any resource) and, when it lists ``resourceNames``, the request names
one of them (so never a create or a list of a whole collection); a non-resource request when its verbs
and ``nonResourceURLs`` match (a URL ending in ``*`` matches every path it starts). A ClusterRole with an
``aggregationRule`` has the rules of the ClusterRoles its selectors match, as once the aggregation
controller of kube-controller-manager has filled them in (its stored ``rules`` are not changed).

RBAC only allows; a request no rule allows gets no opinion, and a :class:`Union` of authorizers denies it
when none allows it. :class:`PrivilegedGroups` allows everything to ``system:masters``, as the API server
does ahead of RBAC. :func:`default_authorizer` is that chain over a store.

:func:`forbidden` is the Status a refused request is answered with (403 ``Forbidden``), worded as the API
server words it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from capa_py.api.workloads import ClusterRole, ClusterRoleBinding, Role, RoleBinding
from capa_py.apiserver.request_info import RequestInfo, resolve
from capa_py.apiserver.reviews import User
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore

ALLOW = "Allow"
DENY = "Deny"
NO_OPINION = "NoOpinion"
SYSTEM_MASTERS = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Decision:
    """An authorizer's answer: :data:`ALLOW`, :data:`DENY` or :data:`NO_OPINION`, and why."""

    outcome: str
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.outcome == ALLOW


class Authorizer(Protocol):
    def authorize(self, user: User, info: RequestInfo) -> Decision: ...


class PrivilegedGroups:
    """Allows everything to members of the given groups (``system:masters``); no opinion otherwise."""

    def __init__(self, groups: Sequence[str] = (SYSTEM_MASTERS,)) -> None:
        self.groups = tuple(groups)

    def authorize(self, user: User, info: RequestInfo) -> Decision:
        if any(group in self.groups for group in user.groups):
            return Decision(ALLOW)
        return Decision(NO_OPINION)


class Union:
    """The first authorizer that allows or denies decides; when none does, no opinion with their reasons
    (one a line)."""

    def __init__(self, *authorizers: Authorizer) -> None:
        self.authorizers = authorizers

    def authorize(self, user: User, info: RequestInfo) -> Decision:
        reasons: list[str] = []
        for authorizer in self.authorizers:
            decision = authorizer.authorize(user, info)
            if decision.outcome in (ALLOW, DENY):
                return decision
            if decision.reason:
                reasons.append(decision.reason)
        return Decision(NO_OPINION, "\n".join(reasons))


# -- rules --------------------------------------------------------------------------------------------------
def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def verb_matches(rule: Mapping[str, Any], verb: str) -> bool:
    return any(v in ("*", verb) for v in _strings(rule.get("verbs")))


def api_group_matches(rule: Mapping[str, Any], group: str) -> bool:
    return any(g in ("*", group) for g in _strings(rule.get("apiGroups")))


def resource_matches(rule: Mapping[str, Any], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for allowed in _strings(rule.get("resources")):
        if allowed in ("*", combined):
            return True
        if subresource and allowed == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: Mapping[str, Any], name: str) -> bool:
    names = _strings(rule.get("resourceNames"))
    return not names or name in names


def non_resource_url_matches(rule: Mapping[str, Any], path: str) -> bool:
    for url in _strings(rule.get("nonResourceURLs")):
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], info: RequestInfo) -> bool:
    if not verb_matches(rule, info.verb):
        return False
    if not info.is_resource_request:
        return non_resource_url_matches(rule, info.path)
    return (
        api_group_matches(rule, info.api_group)
        and resource_matches(rule, info.resource, info.subresource)
        and resource_name_matches(rule, info.name)
    )


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a ``metav1.LabelSelector`` (an empty one matches everything)."""
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            return False
        key, operator = expression.get("key"), expression.get("operator")
        values = _strings(expression.get("values"))
        present = isinstance(key, str) and key in labels
        if operator == "In" and not (present and labels[str(key)] in values):
            return False
        if operator == "NotIn" and present and labels[str(key)] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


# -- subjects -----------------------------------------------------------------------------------------------
def applies_to(user: User, subject: Mapping[str, Any], namespace: str) -> bool:
    """Whether a binding's subject is ``user`` (``namespace``: the RoleBinding's, for a ServiceAccount
    subject without one)."""
    kind, name = subject.get("kind"), subject.get("name")
    if not isinstance(name, str):
        return False
    if kind == "User":
        return user.username == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        account_namespace = subject.get("namespace") or namespace
        if not isinstance(account_namespace, str) or not account_namespace:
            return False
        return user.username == f"{SERVICE_ACCOUNT_PREFIX}{account_namespace}:{name}"
    return False


def describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        namespace = str(subject.get("namespace") or binding_namespace)
        return f'{kind} "{name}/{namespace}"'
    return f'{kind} "{name}"'


def _not_found(kind: str, name: str) -> str:
    return f'{kind.lower()}.{RBAC_GROUP} "{name}" not found'


class RBACAuthorizer:
    """Allows what a rule of a role bound to the user allows; no opinion otherwise (with the reason a
    binding's role could not be read, as the API server gives it)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def authorize(self, user: User, info: RequestInfo) -> Decision:
        errors: list[str] = []
        for source, rule in self.rules_for(user, info.namespace, errors):
            if rule_allows(rule, info):
                return Decision(ALLOW, f"RBAC: allowed by {source}")
        if not errors:
            return Decision(NO_OPINION)
        aggregate = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        return Decision(NO_OPINION, f"RBAC: {aggregate}")

    def rules_for(
        self, user: User, namespace: str, errors: list[str]
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every rule that applies to ``user`` in ``namespace`` (cluster-wide ones first), with where it
        comes from; a binding whose role cannot be read adds its error to ``errors``."""
        for binding in sorted(self.store.list(ClusterRoleBinding), key=lambda b: b.metadata.name):
            for subject in binding.subjects:
                if not applies_to(user, subject, ""):
                    continue
                rules = self.role_rules(binding.role_ref, "", errors)
                if rules is None:
                    break
                source = (
                    f'ClusterRoleBinding "{binding.metadata.name}" of {binding.role_ref.get("kind", "")} '
                    f'"{binding.role_ref.get("name", "")}" to {describe_subject(subject, "")}'
                )
                for rule in rules:
                    yield source, rule
                break
        if not namespace:
            return
        bindings = self.store.list(RoleBinding, namespace)
        for role_binding in sorted(bindings, key=lambda b: b.metadata.name):
            for subject in role_binding.subjects:
                if not applies_to(user, subject, namespace):
                    continue
                rules = self.role_rules(role_binding.role_ref, namespace, errors)
                if rules is None:
                    break
                source = (
                    f'RoleBinding "{role_binding.metadata.name}/{namespace}" of '
                    f'{role_binding.role_ref.get("kind", "")} "{role_binding.role_ref.get("name", "")}" '
                    f"to {describe_subject(subject, namespace)}"
                )
                for rule in rules:
                    yield source, rule
                break

    def role_rules(
        self, role_ref: Mapping[str, Any], namespace: str, errors: list[str]
    ) -> list[Mapping[str, Any]] | None:
        kind, name = role_ref.get("kind"), str(role_ref.get("name", ""))
        if kind == "Role":  # a ClusterRoleBinding's Role would be in no namespace: never found
            try:
                if namespace:
                    return list(self.store.get(Role, name, namespace).rules)
            except NotFound:
                pass
            errors.append(_not_found("Role", name))
            return None
        if kind == "ClusterRole":
            rules = self.cluster_role_rules(name)
            if rules is None:
                errors.append(_not_found("ClusterRole", name))
            return rules
        errors.append(f'unsupported role reference kind: "{kind}"')
        return None

    def cluster_role_rules(
        self, name: str, seen: frozenset[str] = frozenset()
    ) -> list[Mapping[str, Any]] | None:
        """A ClusterRole's rules; an aggregated one's are those of the ClusterRoles it selects."""
        try:
            role = self.store.get(ClusterRole, name)
        except NotFound:
            return None
        aggregation = role.aggregation_rule
        if not aggregation:
            return list(role.rules)
        selectors = [s for s in aggregation.get("clusterRoleSelectors") or [] if isinstance(s, dict)]
        rules: list[Mapping[str, Any]] = []
        for other in sorted(self.store.list(ClusterRole), key=lambda r: r.metadata.name):
            if other.metadata.name in seen | {name}:
                continue
            if any(_selector_matches(s, other.metadata.labels) for s in selectors):
                for rule in self.cluster_role_rules(other.metadata.name, seen | {name}) or []:
                    if rule not in rules:
                        rules.append(rule)
        return rules


def default_authorizer(store: ObjectStore) -> Authorizer:
    """``system:masters`` first, then RBAC over ``store``: what the API server runs with
    ``--authorization-mode=RBAC``."""
    return Union(PrivilegedGroups(), RBACAuthorizer(store))


# -- refusals -----------------------------------------------------------------------------------------------
def forbidden_message(user: User, info: RequestInfo) -> str:
    if not info.is_resource_request:
        return f'User "{user.username}" cannot {info.verb} path "{info.path}"'
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    return (
        f'User "{user.username}" cannot {info.verb} resource "{resource}" '
        f'in API group "{info.api_group}" {where}'
    )


def forbidden(user: User, info: RequestInfo, reason: str) -> dict[str, Any]:
    """The Status a refused request is answered with (its code 403)."""
    message = forbidden_message(user, info)
    if reason:
        message = f"{message}: {reason}"
    details: dict[str, Any] = {}
    qualified = ""
    if info.is_resource_request and info.resource:
        qualified = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    if not qualified:
        message = f"forbidden: {message}"
    elif info.name:
        message = f'{qualified} "{info.name}" is forbidden: {message}'
    else:
        message = f"{qualified} is forbidden: {message}"
    if info.name:
        details["name"] = info.name
    if qualified and info.api_group:
        details["group"] = info.api_group
    if qualified:
        details["kind"] = info.resource
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


def rules_review(authorizer: Authorizer, user: User, namespace: str) -> dict[str, Any]:
    """A SelfSubjectRulesReview's status for ``user`` in ``namespace``: the rules RBAC grants."""
    errors: list[str] = []
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for rbac in rbac_authorizers(authorizer):
        for _, rule in rbac.rules_for(user, namespace, errors):
            if rule.get("nonResourceURLs"):
                non_resource_rules.append(
                    {
                        "verbs": _strings(rule.get("verbs")),
                        "nonResourceURLs": _strings(rule.get("nonResourceURLs")),
                    }
                )
            else:
                entry = {
                    key: _strings(rule.get(key))
                    for key in ("verbs", "apiGroups", "resources", "resourceNames")
                    if rule.get(key)
                }
                entry.setdefault("verbs", [])
                resource_rules.append(entry)
    status: dict[str, Any] = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": False,  # as the API server answers it, even with an evaluation error
    }
    if errors:
        status["evaluationError"] = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return status


def _chain(authorizer: Authorizer) -> Iterable[Authorizer]:
    if isinstance(authorizer, Union):
        for inner in authorizer.authorizers:
            yield from _chain(inner)
    else:
        yield authorizer


def rbac_authorizers(authorizer: Authorizer) -> list[RBACAuthorizer]:
    return [a for a in _chain(authorizer) if isinstance(a, RBACAuthorizer)]


# -- enforcement --------------------------------------------------------------------------------------------
def refusal(
    authorizer: Authorizer, user: User, method: str, path: str, query: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The Status to refuse a request with when ``user`` may not make it (``None`` when it may): the
    decision :func:`capa_py.apiserver.reviews.authorize` makes, as for a SelfSubjectAccessReview."""
    from capa_py.apiserver.reviews import authorize

    info = resolve(method, path, query)
    allowed, reason = authorize(user, info, authorizer)
    return None if allowed else forbidden(user, info, reason)
