"""Cluster API Provider AWS's identity kinds (``infrastructure.cluster.x-k8s.io/v1beta2``): whose AWS
credentials an AWSCluster's controllers use.

* ``AWSClusterControllerIdentity`` (``awsci``): the controller's own credentials; one object, named
  ``default``, that only says which namespaces may use them.
* ``AWSClusterStaticIdentity`` (``awssi``): an access key kept in a Secret of the controller's namespace
  (``spec.secretRef``), with the keys ``AccessKeyID``, ``SecretAccessKey`` and, optionally,
  ``SessionToken``.
* ``AWSClusterRoleIdentity`` (``awsri``): a role assumed with STS AssumeRole (``roleARN``, ``sessionName``,
  ``durationSeconds``, ``externalID``, ``inlinePolicy``, ``policyARNs``) from the credentials of
  ``sourceIdentityRef`` (another identity of any of the three kinds, so roles chain), or from the
  controller's own when it names none.

All three are cluster-scoped. Each holds ``allowedNamespaces`` with Cluster API Provider AWS's semantics:
absent, no namespace may use the identity; ``{}``, every namespace may; otherwise a namespace may when it
is in ``list`` or its labels match ``selector`` (an empty ``list`` or ``selector`` admits nothing).
An AWSCluster names one in ``spec.identityRef``; without one it uses the controller's credentials.

The objects hold no secret: a static identity's key stays in its Secret, read when a client is made.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from capa_py.api.aws_common import INFRA_API_VERSION
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject, keep_when_empty
from capa_py.api.tinkerbell_capi import LabelSelector

CONTROLLER_IDENTITY_KIND = "AWSClusterControllerIdentity"
STATIC_IDENTITY_KIND = "AWSClusterStaticIdentity"
ROLE_IDENTITY_KIND = "AWSClusterRoleIdentity"
IDENTITY_KINDS_BY_NAME = (CONTROLLER_IDENTITY_KIND, STATIC_IDENTITY_KIND, ROLE_IDENTITY_KIND)
CONTROLLER_IDENTITY_NAME = "default"
"""The one name an AWSClusterControllerIdentity may have (as in Cluster API Provider AWS)."""

IdentityKind = Literal["AWSClusterControllerIdentity", "AWSClusterStaticIdentity", "AWSClusterRoleIdentity"]

MIN_DURATION_SECONDS = 900
MAX_DURATION_SECONDS = 43200


class AllowedNamespaces(KubeModel):
    """Which namespaces' AWSClusters may use an identity: ``{}`` every namespace; otherwise those named in
    ``list`` and those whose labels match ``selector``."""

    namespace_list: list[str] | None = Field(
        default=None,
        alias="list",
        description="Namespaces that may use the identity; an empty list admits none.",
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="Namespaces whose labels match may use the identity; an empty selector admits none.",
    )

    def allows_every_namespace(self) -> bool:
        return not self.namespace_list and not _selects(self.selector)

    def allows(self, namespace: str, labels: dict[str, str]) -> bool:
        """Whether an AWSCluster in ``namespace`` (with these labels) may use the identity."""
        if self.allows_every_namespace():
            return True
        if self.namespace_list and namespace in self.namespace_list:
            return True
        return self.selector is not None and _selects(self.selector) and self.selector.matches(labels)

    def issues(self, path: str) -> list[FieldIssue]:
        found: list[FieldIssue] = []
        if self.namespace_list is not None and not self.namespace_list:
            # On the wire an empty list is dropped, which would turn {list: []} into {} (every namespace).
            found.append(
                FieldIssue(
                    path=f"{path}.list",
                    message="an empty list admits no namespace: remove allowedNamespaces to allow none, "
                    "or name the namespaces",
                )
            )
        if self.selector is not None:
            found += self.selector.issues(f"{path}.selector")
        return found


def _selects(selector: LabelSelector | None) -> bool:
    return selector is not None and bool(selector.match_labels or selector.match_expressions)


def allowed_namespaces_field() -> AllowedNamespaces | None:
    return Field(
        default=None,
        alias=keep_when_empty("allowedNamespaces"),
        description="Which namespaces' AWSClusters may use this identity: absent, none; {} every namespace; "
        "otherwise those in list or matching selector.",
    )


ROLE_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$"
"""An IAM role's ARN (any partition), as ``roleARN`` and ``capa iam policy --assume-role`` take it."""


class AWSIdentityReference(KubeModel):
    """An identity an AWSCluster (``spec.identityRef``) or a role identity (``sourceIdentityRef``) uses."""

    name: str = Field(min_length=1)
    kind: IdentityKind


class AWSClusterControllerIdentitySpec(KubeModel):
    allowed_namespaces: AllowedNamespaces | None = allowed_namespaces_field()


class AWSClusterStaticIdentitySpec(KubeModel):
    allowed_namespaces: AllowedNamespaces | None = allowed_namespaces_field()
    secret_ref: str = Field(
        min_length=1,
        description="The Secret, in the controller's namespace, holding AccessKeyID, SecretAccessKey and "
        "optionally SessionToken.",
    )


class AWSClusterRoleIdentitySpec(KubeModel):
    allowed_namespaces: AllowedNamespaces | None = allowed_namespaces_field()
    role_arn: str = Field(alias="roleARN", pattern=ROLE_ARN_PATTERN, description="The role to assume.")
    session_name: str | None = Field(
        default=None,
        pattern=r"^[\w+=,.@-]{2,64}$",
        description="The role session's name (default: capa-py-<identity name>).",
    )
    duration_seconds: int = Field(
        default=MIN_DURATION_SECONDS,
        ge=MIN_DURATION_SECONDS,
        le=MAX_DURATION_SECONDS,
        description="How long the assumed credentials last; they are renewed before they expire.",
    )
    inline_policy: str | None = Field(
        default=None, description="A session policy (JSON) further limiting the assumed role."
    )
    policy_arns: list[str] = Field(
        default_factory=list,
        alias="policyARNs",
        description="Managed policies further limiting the assumed role.",
    )
    external_id: str | None = Field(
        default=None, alias="externalID", description="The external id the role's trust policy asks for."
    )
    source_identity_ref: AWSIdentityReference | None = Field(
        default=None,
        description="The identity whose credentials assume the role (default: the controller's own).",
    )


class _Identity(KubeObject):
    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    NAMESPACED: ClassVar[bool] = False
    HAS_STATUS: ClassVar[bool] = False

    @property
    def allowed(self) -> AllowedNamespaces | None:
        return self.spec.allowed_namespaces  # type: ignore[attr-defined, no-any-return]

    def semantic_issues(self) -> list[FieldIssue]:
        allowed = self.allowed
        return allowed.issues("spec.allowedNamespaces") if allowed is not None else []


class AWSClusterControllerIdentity(_Identity):
    """The controller's own credentials, and which namespaces may use them through ``identityRef``."""

    KIND: ClassVar[str] = CONTROLLER_IDENTITY_KIND
    PLURAL: ClassVar[str] = "awsclustercontrolleridentities"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsci",)

    spec: AWSClusterControllerIdentitySpec = Field(default_factory=AWSClusterControllerIdentitySpec)

    @classmethod
    def check_name(cls, name: str) -> str:
        if name != CONTROLLER_IDENTITY_NAME:
            raise ValueError(f"an AWSClusterControllerIdentity must be named {CONTROLLER_IDENTITY_NAME!r}")
        return name


class AWSClusterStaticIdentity(_Identity):
    """An access key in a Secret of the controller's namespace."""

    KIND: ClassVar[str] = STATIC_IDENTITY_KIND
    PLURAL: ClassVar[str] = "awsclusterstaticidentities"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awssi",)

    spec: AWSClusterStaticIdentitySpec


class AWSClusterRoleIdentity(_Identity):
    """A role assumed with STS from another identity's credentials (or the controller's)."""

    KIND: ClassVar[str] = ROLE_IDENTITY_KIND
    PLURAL: ClassVar[str] = "awsclusterroleidentities"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsri",)

    spec: AWSClusterRoleIdentitySpec

    def semantic_issues(self) -> list[FieldIssue]:
        issues = super().semantic_issues()
        source = self.spec.source_identity_ref
        if source is not None and source.kind == ROLE_IDENTITY_KIND and source.name == self.name:
            issues.append(
                FieldIssue(path="spec.sourceIdentityRef", message="a role identity cannot be its own source")
            )
        for index, arn in enumerate(self.spec.policy_arns):
            if not arn.startswith("arn:"):
                issues.append(FieldIssue(path=f"spec.policyARNs[{index}]", message=f"{arn!r} is not an ARN"))
        return issues


IDENTITY_KINDS: tuple[type[KubeObject], ...] = (
    AWSClusterControllerIdentity,
    AWSClusterStaticIdentity,
    AWSClusterRoleIdentity,
)
MODEL_OF_KIND: dict[str, type[_Identity]] = {
    CONTROLLER_IDENTITY_KIND: AWSClusterControllerIdentity,
    STATIC_IDENTITY_KIND: AWSClusterStaticIdentity,
    ROLE_IDENTITY_KIND: AWSClusterRoleIdentity,
}

__all__ = [
    "CONTROLLER_IDENTITY_KIND",
    "CONTROLLER_IDENTITY_NAME",
    "IDENTITY_KINDS",
    "MODEL_OF_KIND",
    "ROLE_IDENTITY_KIND",
    "STATIC_IDENTITY_KIND",
    "AWSClusterControllerIdentity",
    "AWSClusterRoleIdentity",
    "AWSClusterStaticIdentity",
    "AWSIdentityReference",
    "AllowedNamespaces",
]
