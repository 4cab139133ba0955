"""The Cluster API bare-metal provider's kinds (``infrastructure.cluster.x-k8s.io/v1beta1``), named as the
Tinkerbell provider for Cluster API names them: TinkerbellCluster, TinkerbellMachine and
TinkerbellMachineTemplate.

Only the fields capa-py acts on are defined (docs/tinkerbell/cluster-api.md lists the provider's fields left
out). One
difference from the provider: ``status.instanceStatus`` is a string, the state of the machine's Workflow
(``Pending`` ... ``Succeeded``), where the provider keeps an integer enum it never documents.

Validation (``semantic_issues``) names the field: an endpoint without a host or with a port outside
1-65535, a selector operator other than ``In``/``NotIn``/``Exists``/``DoesNotExist`` or with values that do
not fit it, a preferred weight outside 1-100, and a ``templateOverride`` that is not YAML of a Template's
``spec`` passing the Template checks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

import yaml
from pydantic import Field, ValidationError

from capa_py.api import tinkerbell_checks as checks
from capa_py.api.cluster import APIEndpoint, MachineAddress
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject
from capa_py.api.templates import InfrastructureTemplate, TemplateResource
from capa_py.api.tinkerbell import TemplateSpec

if TYPE_CHECKING:
    from capa_py.store.selectors import LabelSelector as StoreSelector

CAPT_API_VERSION = "infrastructure.cluster.x-k8s.io/v1beta1"
TINKERBELL_MACHINE_FINALIZER = "tinkerbellmachine.infrastructure.cluster.x-k8s.io"
HARDWARE_OWNER_NAME_LABEL = "v1alpha1.tinkerbell.org/ownerName"
"""On a claimed Hardware: the name of the TinkerbellMachine that owns it (the provider's label)."""
HARDWARE_OWNER_NAMESPACE_LABEL = "v1alpha1.tinkerbell.org/ownerNamespace"
"""On a claimed Hardware: the namespace of the TinkerbellMachine that owns it (the provider's label)."""
PROVIDER_ID_SCHEME = "tinkerbell"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MIN_WEIGHT, MAX_WEIGHT = 1, 100

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _issue(path: str, message: str) -> FieldIssue:
    return FieldIssue(path=path, message=message)


# -- label selectors ----------------------------------------------------------------------------------
class LabelSelectorRequirement(KubeModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class LabelSelector(KubeModel):
    """A Kubernetes ``metav1.LabelSelector``: every ``matchLabels`` pair and every expression must hold."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def issues(self, path: str) -> list[FieldIssue]:
        found: list[FieldIssue] = []
        for key, value in self.match_labels.items():
            where = f"{path}.matchLabels{checks.wire_key(key)}"
            if not _LABEL_KEY.match(key) or len(key.rpartition("/")[0]) > 253:
                found.append(_issue(where, f"{key!r} is not a valid label key"))
            if not _LABEL_VALUE.match(value):
                found.append(_issue(where, f"{value!r} is not a valid label value"))
        for index, expression in enumerate(self.match_expressions):
            where = f"{path}.matchExpressions[{index}]"
            if not _LABEL_KEY.match(expression.key):
                found.append(_issue(f"{where}.key", f"{expression.key!r} is not a valid label key"))
            if expression.operator not in OPERATORS:
                found.append(
                    _issue(
                        f"{where}.operator",
                        f"{expression.operator!r} is not a valid operator (one of {', '.join(OPERATORS)})",
                    )
                )
            elif expression.operator in ("In", "NotIn") and not expression.values:
                found.append(_issue(f"{where}.values", f"must be non-empty for {expression.operator}"))
            elif expression.operator in ("Exists", "DoesNotExist") and expression.values:
                found.append(_issue(f"{where}.values", f"must be empty for {expression.operator}"))
        return found

    def selector(self) -> StoreSelector:
        """The same selector as the store evaluates them (valid selectors only)."""
        from capa_py.store.selectors import LabelSelector as StoreSelector
        from capa_py.store.selectors import Requirement

        requirements = [Requirement(key, "=", (value,)) for key, value in sorted(self.match_labels.items())]
        operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
        requirements += [
            Requirement(e.key, operators[e.operator], tuple(e.values))  # type: ignore[arg-type]
            for e in self.match_expressions
        ]
        return StoreSelector(tuple(requirements))

    def matches(self, labels: dict[str, str]) -> bool:
        return self.selector().matches(labels)


class HardwareAffinityTerm(KubeModel):
    label_selector: LabelSelector = Field(default_factory=LabelSelector)


class WeightedHardwareAffinityTerm(KubeModel):
    weight: int
    hardware_affinity_term: HardwareAffinityTerm


class HardwareAffinity(KubeModel):
    required: list[HardwareAffinityTerm] = Field(default_factory=list)
    """A Hardware qualifies when it matches any one term (the provider ORs them); no term: any Hardware."""
    preferred: list[WeightedHardwareAffinityTerm] = Field(default_factory=list)
    """Qualifying Hardware is ranked by the sum of the weights of the terms it matches."""

    def issues(self, path: str) -> list[FieldIssue]:
        found: list[FieldIssue] = []
        for index, term in enumerate(self.required):
            found += term.label_selector.issues(f"{path}.required[{index}].labelSelector")
        for index, weighted in enumerate(self.preferred):
            where = f"{path}.preferred[{index}]"
            if not MIN_WEIGHT <= weighted.weight <= MAX_WEIGHT:
                found.append(
                    _issue(f"{where}.weight", f"{weighted.weight} is not in {MIN_WEIGHT}-{MAX_WEIGHT}")
                )
            found += weighted.hardware_affinity_term.label_selector.issues(
                f"{where}.hardwareAffinityTerm.labelSelector"
            )
        return found

    def qualifies(self, labels: dict[str, str]) -> bool:
        return not self.required or any(t.label_selector.matches(labels) for t in self.required)

    def score(self, labels: dict[str, str]) -> int:
        return sum(
            w.weight for w in self.preferred if w.hardware_affinity_term.label_selector.matches(labels)
        )


# -- TinkerbellCluster -----------------------------------------------------------------------------------
class TinkerbellClusterSpec(KubeModel):
    control_plane_endpoint: APIEndpoint = Field(default_factory=APIEndpoint)


class TinkerbellClusterStatus(InfrastructureStatus):
    observed_generation: int | None = None


def endpoint_issues(endpoint: APIEndpoint, path: str) -> list[FieldIssue]:
    found: list[FieldIssue] = []
    if not endpoint.host.strip():
        found.append(_issue(f"{path}.host", "required"))
    if not 1 <= endpoint.port <= 65535:
        found.append(_issue(f"{path}.port", f"{endpoint.port} is not a port (1-65535)"))
    return found


class TinkerbellCluster(KubeObject):
    """A cluster whose machines are Tinkerbell Hardware; its control-plane endpoint is given, not made."""

    API_VERSION: ClassVar[str] = CAPT_API_VERSION
    KIND: ClassVar[str] = "TinkerbellCluster"
    PLURAL: ClassVar[str] = "tinkerbellclusters"

    spec: TinkerbellClusterSpec = Field(default_factory=TinkerbellClusterSpec)
    status: TinkerbellClusterStatus = Field(default_factory=TinkerbellClusterStatus)

    def semantic_issues(self) -> list[FieldIssue]:
        if self.being_deleted:
            return []
        return endpoint_issues(self.spec.control_plane_endpoint, "spec.controlPlaneEndpoint")


# -- TinkerbellMachine -----------------------------------------------------------------------------------
def parse_template_override(text: str) -> TemplateSpec:
    """A Template's ``spec`` from YAML text; ValueError says what is wrong (without quoting the text)."""
    try:
        document: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"not YAML{where}") from None
    if not isinstance(document, dict):
        raise ValueError("must be a YAML mapping: a Template's spec (actions, env, volumes)")
    try:
        return TemplateSpec.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        raise ValueError(f"{field}: {error['msg']}") from None


class TinkerbellMachineSpec(KubeModel):
    provider_id: str | None = Field(default=None, alias="providerID")
    hardware_name: str | None = None
    template_override: str | None = None
    hardware_affinity: HardwareAffinity | None = None

    def issues(self, path: str) -> list[FieldIssue]:
        found: list[FieldIssue] = []
        if self.hardware_affinity is not None:
            found += self.hardware_affinity.issues(f"{path}.hardwareAffinity")
        if self.template_override is not None:
            where = f"{path}.templateOverride"
            try:
                spec = parse_template_override(self.template_override)
            except ValueError as exc:
                found.append(_issue(where, str(exc)))
            else:
                found += [
                    _issue(where, f"{issue.path.removeprefix('spec.')}: {issue.message}")
                    for issue in checks.template_issues(spec)
                ]
        return found


class TinkerbellMachineStatus(InfrastructureStatus):
    addresses: list[MachineAddress] = Field(default_factory=list)
    instance_status: str | None = None
    error_reason: str | None = None
    error_message: str | None = None
    observed_generation: int | None = None

    @property
    def failure_reason(self) -> str | None:
        """What Cluster API core reads as the infrastructure's failure (the provider calls it errorReason)."""
        return self.error_reason

    @property
    def failure_message(self) -> str | None:
        return self.error_message


class TinkerbellMachine(KubeObject):
    """A Machine's bare-metal side: the Hardware it runs on and the Workflow that provisioned it."""

    API_VERSION: ClassVar[str] = CAPT_API_VERSION
    KIND: ClassVar[str] = "TinkerbellMachine"
    PLURAL: ClassVar[str] = "tinkerbellmachines"

    spec: TinkerbellMachineSpec = Field(default_factory=TinkerbellMachineSpec)
    status: TinkerbellMachineStatus = Field(default_factory=TinkerbellMachineStatus)

    def semantic_issues(self) -> list[FieldIssue]:
        return [] if self.being_deleted else self.spec.issues("spec")


# -- TinkerbellMachineTemplate ---------------------------------------------------------------------------
class TinkerbellMachineTemplateResource(TemplateResource):
    """Each TinkerbellMachine made from the template: its labels and annotations, and its spec."""

    spec: TinkerbellMachineSpec = Field(
        default_factory=TinkerbellMachineSpec,
        description="The spec of each TinkerbellMachine made from the template.",
    )


class TinkerbellMachineTemplateSpec(KubeModel):
    """Immutable after create: a changed template is a new template."""

    template: TinkerbellMachineTemplateResource = Field(default_factory=TinkerbellMachineTemplateResource)


class TinkerbellMachineTemplate(InfrastructureTemplate):
    """The TinkerbellMachine a machine-cloning controller (MachineDeployment, KubeadmControlPlane) stamps
    out: ``spec.template.metadata`` (labels, annotations) and ``spec.template.spec``, a TinkerbellMachine's
    spec validated as one, without ``providerID`` or ``hardwareName`` (one machine's, as the provider's
    webhook says). The spec cannot change after create."""

    API_VERSION: ClassVar[str] = CAPT_API_VERSION
    KIND: ClassVar[str] = "TinkerbellMachineTemplate"
    PLURAL: ClassVar[str] = "tinkerbellmachinetemplates"
    TEMPLATED_KIND: ClassVar[str] = "TinkerbellMachine"
    TEMPLATED_MODEL: ClassVar[type[KubeObject]] = TinkerbellMachine
    INSTANCE_ONLY_FIELDS: ClassVar[tuple[str, ...]] = ("providerID", "hardwareName")

    spec: TinkerbellMachineTemplateSpec = Field(default_factory=TinkerbellMachineTemplateSpec)


TINKERBELL_CAPI_KINDS: tuple[type[KubeObject], ...] = (
    TinkerbellCluster,
    TinkerbellMachine,
    TinkerbellMachineTemplate,
)
