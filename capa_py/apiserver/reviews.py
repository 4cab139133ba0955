"""Who the caller is and what it may do: ``authentication.k8s.io/v1`` SelfSubjectReview (``kubectl auth
whoami``) and ``authorization.k8s.io/v1`` SelfSubjectAccessReview (``kubectl auth can-i``),
SelfSubjectRulesReview (``kubectl auth can-i --list``) and SubjectAccessReview (what may another user do),
create only, answered as the server's authorizer (:mod:`capa_py.apiserver.rbac`) decides.

``capa serve`` authenticates every request (:mod:`capa_py.apiserver.authentication` records the user with
:func:`authenticated`; :func:`caller` reads it back, :data:`UNAUTHENTICATED_CALLER` where nothing was
recorded) and authorizes it (:mod:`capa_py.apiserver.rbac`). :func:`authorize` is the one place a decision
is made: for every request ``capa serve`` enforces and for every review it answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from capa_py.api.meta import utcnow
from capa_py.apiserver.request_info import RequestInfo, from_review
from capa_py.apiserver.status import ApiError, Cause

if TYPE_CHECKING:
    from capa_py.apiserver.rbac import Authorizer

AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"


@dataclass(frozen=True)
class User:
    """An authenticated identity, as ``UserInfo`` carries it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def user_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"username": self.username}
        if self.uid:
            info["uid"] = self.uid
        if self.groups:
            info["groups"] = list(self.groups)
        if self.extra:
            info["extra"] = {k: list(v) for k, v in self.extra.items()}
        return info


_USER_KEY: Any = web.RequestKey("capa.user", User) if hasattr(web, "RequestKey") else "capa.user"
"""Where the user a request was made by is kept on it (a typed key where aiohttp has them, from 3.14)."""

UNAUTHENTICATED_CALLER = User("system:anonymous", groups=("system:unauthenticated",))
"""A request without credentials (admitted to the public information endpoints only)."""


def authenticated(request: web.Request, user: User) -> None:
    """Record who made ``request`` (what authentication calls once it has found out)."""
    request[_USER_KEY] = user


def caller(request: web.Request) -> User:
    """The user a request was made by: what :func:`authenticated` recorded, else the anonymous caller."""
    user = request.get(_USER_KEY)
    return user if isinstance(user, User) else UNAUTHENTICATED_CALLER


def authorize(user: User, info: RequestInfo, authorizer: Authorizer) -> tuple[bool, str]:
    """Whether ``user`` may do what ``info`` describes, and why, as ``authorizer`` decides."""
    decision = authorizer.authorize(user, info)
    return decision.allowed, decision.reason


def rules_for(authorizer: Authorizer, user: User, namespace: str) -> dict[str, Any]:
    """A SelfSubjectRulesReview's status: the rules ``authorizer`` grants ``user`` in ``namespace``."""
    from capa_py.apiserver.rbac import rules_review

    return rules_review(authorizer, user, namespace)


@dataclass(frozen=True)
class Review:
    group: str
    version: str
    resource: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def discovery(self) -> dict[str, Any]:
        return {
            "name": self.resource,
            "singularName": self.kind.lower(),
            "namespaced": False,
            "kind": self.kind,
            "verbs": ["create"],
        }


REVIEWS = (
    Review(AUTHENTICATION, "v1", "selfsubjectreviews", "SelfSubjectReview"),
    Review(AUTHORIZATION, "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    Review(AUTHORIZATION, "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
    Review(AUTHORIZATION, "v1", "subjectaccessreviews", "SubjectAccessReview"),
)


def served(group: str, version: str) -> list[Review]:
    """The reviews served under one group-version (none for a group of the registry)."""
    return [r for r in REVIEWS if (r.group, r.version) == (group, version)]


def groups() -> dict[str, list[str]]:
    """The review groups and their versions, for discovery."""
    found: dict[str, list[str]] = {}
    for review in REVIEWS:
        found.setdefault(review.group, [])
        if review.version not in found[review.group]:
            found[review.group].append(review.version)
    return found


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    reviews = served(group, version)
    if not reviews:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [r.discovery() for r in sorted(reviews, key=lambda r: r.resource)],
    }


def find(group: str, version: str, rest: list[str]) -> Review | None:
    """The review a path names (``rest`` after the group-version), or ``None``."""
    if len(rest) != 1:
        return None
    return next((r for r in served(group, version) if r.resource == rest[0]), None)


def _invalid_access_review(field_path: str, value: str, detail: str) -> ApiError:
    message = f"Invalid value: {value}: {detail}"
    return ApiError(
        422,
        f'.{AUTHORIZATION} "" is invalid: {field_path}: {message}',
        group=AUTHORIZATION,
        causes=[Cause(field_path, message)],
    )


def _reviewed_user(spec: Mapping[str, Any]) -> User:
    """The user a SubjectAccessReview asks about (``spec.user``, ``groups``, ``uid``, ``extra``)."""
    if not spec.get("user") and not spec.get("groups"):
        raise _invalid_access_review("spec.user", '""', "at least one of user or group must be specified")
    groups = spec.get("groups")
    extra = spec.get("extra")
    return User(
        username=str(spec.get("user") or ""),
        uid=str(spec.get("uid") or ""),
        groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        extra={
            str(k): tuple(str(v) for v in values)
            for k, values in (extra.items() if isinstance(extra, dict) else ())
            if isinstance(values, list)
        },
    )


def answer(review: Review, body: Any, user: User, authorizer: Authorizer) -> dict[str, Any]:
    """The review, answered for ``user`` (what a create returns, 201) as ``authorizer`` decides."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    metadata: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    document: dict[str, Any] = {"kind": review.kind, "apiVersion": review.api_version}
    if review.kind == "SelfSubjectReview":
        document["metadata"] = {**metadata, "creationTimestamp": utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}
        document["status"] = {"userInfo": user.user_info()}
        return document
    spec: dict[str, Any] = body["spec"] if isinstance(body.get("spec"), dict) else {}
    if review.kind == "SelfSubjectRulesReview":
        namespace = spec.get("namespace")
        document["metadata"] = {}  # as the API server answers: a new review holding only its status
        document["spec"] = {}
        document["status"] = rules_for(authorizer, user, namespace if isinstance(namespace, str) else "")
        return document
    if review.kind == "SubjectAccessReview":
        user = _reviewed_user(spec)
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if resource is None and non_resource is None:
        raise _invalid_access_review(
            "spec.resourceAttributes",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if resource is not None and non_resource is not None:
        raise _invalid_access_review(
            "spec.nonResourceAttributes",
            "{...}",
            "cannot be specified in combination with resourceAttributes",
        )
    attributes = resource if resource is not None else non_resource
    info = from_review(attributes if isinstance(attributes, dict) else {}, resource is not None)
    allowed, reason = authorize(user, info, authorizer)
    document["metadata"] = metadata
    document["spec"] = spec
    document["status"] = {"allowed": allowed, "reason": reason} if reason else {"allowed": allowed}
    return document
