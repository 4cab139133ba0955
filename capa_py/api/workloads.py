"""The kinds a provider's components file holds besides CRDs, kept as stored objects.

``capa manifests all`` is what a management cluster installs: a ServiceAccount, a ClusterRole and its
binding (``rbac.authorization.k8s.io/v1``), the controller Deployment (``apps/v1``) and its metrics Service.
A cluster's network add-on (its CNI manifest) adds a DaemonSet, one agent per node, and a ConfigMap.
``capa serve`` stores them so that ``kubectl apply -f <(capa manifests all)`` and a CNI manifest apply to it
as to a real cluster; nothing acts on them (no pods are run, no Service gets an address) except the RBAC
kinds (Role, ClusterRole and their bindings), which :mod:`capa_py.apiserver.rbac` enforces when ``capa
serve`` is given an authorizer.

Their contents are stored exactly as given (:class:`AsGiven`): the wire form drops no empty map or list
inside them, since an ``emptyDir: {}`` volume or ``resources: [""]`` means something there.
"""

from __future__ import annotations

import copy
import json
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator

from capa_py.api.meta import FieldIssue, KubeObject, ObjectMeta, validate_path_segment_name


class AsGiven(KubeObject):
    """A kind whose fields named in ``AS_GIVEN`` (wire names) are served exactly as written."""

    AS_GIVEN: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        doc = super().to_dict()
        raw = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        for name in self.AS_GIVEN:
            value = raw.get(name)
            if value not in (None, {}, []):
                doc[name] = copy.deepcopy(value)
        return doc


class RBACObjectMeta(ObjectMeta):
    """The metadata of an RBAC object, whose name need only be a path segment (``system:basic-user``)."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return validate_path_segment_name(value) if value else value


class RBACObject(AsGiven):
    """A Role, ClusterRole or binding: named as the API server allows RBAC objects to be."""

    HAS_STATUS: ClassVar[bool] = False

    metadata: RBACObjectMeta = Field(default_factory=RBACObjectMeta)

    @classmethod
    def check_name(cls, name: str) -> str:
        return validate_path_segment_name(name)


class ServiceAccount(AsGiven):
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "ServiceAccount"
    PLURAL: ClassVar[str] = "serviceaccounts"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("sa",)
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("secrets", "imagePullSecrets")

    secrets: list[dict[str, Any]] = Field(default_factory=list)
    image_pull_secrets: list[dict[str, Any]] = Field(default_factory=list)
    automount_service_account_token: bool | None = None


class ClusterRole(RBACObject):
    API_VERSION: ClassVar[str] = "rbac.authorization.k8s.io/v1"
    KIND: ClassVar[str] = "ClusterRole"
    PLURAL: ClassVar[str] = "clusterroles"
    NAMESPACED: ClassVar[bool] = False
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("rules", "aggregationRule")

    rules: list[dict[str, Any]] = Field(default_factory=list)
    aggregation_rule: dict[str, Any] | None = None


def _role_ref_issues(new: dict[str, Any], old: dict[str, Any]) -> list[FieldIssue]:
    """A binding's roleRef never changes (a binding to another role is a new binding): worded as the API
    server words the refusal, the new reference as Go prints its internal form."""
    if new == old:
        return []
    shown = {"APIGroup": new.get("apiGroup", ""), "Kind": new.get("kind", ""), "Name": new.get("name", "")}
    value = json.dumps(shown, separators=(",", ":"))
    return [FieldIssue(path="roleRef", message=f"Invalid value: {value}: cannot change roleRef")]


class ClusterRoleBinding(RBACObject):
    API_VERSION: ClassVar[str] = "rbac.authorization.k8s.io/v1"
    KIND: ClassVar[str] = "ClusterRoleBinding"
    PLURAL: ClassVar[str] = "clusterrolebindings"
    NAMESPACED: ClassVar[bool] = False
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("roleRef", "subjects")

    role_ref: dict[str, Any] = Field(default_factory=dict)
    subjects: list[dict[str, Any]] = Field(default_factory=list)

    def immutable_issues(self, old: Self) -> list[FieldIssue]:
        return _role_ref_issues(self.role_ref, old.role_ref)


class Role(RBACObject):
    API_VERSION: ClassVar[str] = "rbac.authorization.k8s.io/v1"
    KIND: ClassVar[str] = "Role"
    PLURAL: ClassVar[str] = "roles"
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("rules",)

    rules: list[dict[str, Any]] = Field(default_factory=list)


class RoleBinding(RBACObject):
    API_VERSION: ClassVar[str] = "rbac.authorization.k8s.io/v1"
    KIND: ClassVar[str] = "RoleBinding"
    PLURAL: ClassVar[str] = "rolebindings"
    HAS_STATUS: ClassVar[bool] = False
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("roleRef", "subjects")

    role_ref: dict[str, Any] = Field(default_factory=dict)
    subjects: list[dict[str, Any]] = Field(default_factory=list)

    def immutable_issues(self, old: Self) -> list[FieldIssue]:
        return _role_ref_issues(self.role_ref, old.role_ref)


class Deployment(AsGiven):
    API_VERSION: ClassVar[str] = "apps/v1"
    KIND: ClassVar[str] = "Deployment"
    PLURAL: ClassVar[str] = "deployments"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("deploy",)
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("spec", "status")

    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class DaemonSet(AsGiven):
    API_VERSION: ClassVar[str] = "apps/v1"
    KIND: ClassVar[str] = "DaemonSet"
    PLURAL: ClassVar[str] = "daemonsets"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ds",)
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("spec", "status")

    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class Service(AsGiven):
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Service"
    PLURAL: ClassVar[str] = "services"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("svc",)
    AS_GIVEN: ClassVar[tuple[str, ...]] = ("spec", "status")

    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


WORKLOAD_KINDS: tuple[type[KubeObject], ...] = (
    ServiceAccount,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
    Deployment,
    DaemonSet,
    Service,
)
