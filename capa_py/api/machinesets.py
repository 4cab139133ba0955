"""Cluster API core's MachineDeployment and MachineSet (``cluster.x-k8s.io/v1beta1``).

The fields, defaults and admission rules are Cluster API's v1beta1 ones, so a manifest written for a
management cluster running Cluster API core is accepted (and defaulted the same way) by capa-py's embedded
core; the controllers are :mod:`controllers.machinesets`.

Defaulting (what Cluster API's defaulting webhooks do, run here when the object is written): the
``cluster.x-k8s.io/cluster-name`` label on the object, in ``spec.selector.matchLabels`` and in
``spec.template.metadata.labels``; an empty selector becomes the object's own name label
(``cluster.x-k8s.io/deployment-name`` or ``cluster.x-k8s.io/set-name``) in both; ``replicas`` 1; a
MachineDeployment's ``revisionHistoryLimit`` 1, ``progressDeadlineSeconds`` 600, strategy ``RollingUpdate``
with ``maxSurge`` 1 and ``maxUnavailable`` 0; a MachineSet's ``deletePolicy`` ``Random``; a version without a
leading ``v`` gets one; ``infrastructureRef.namespace`` is the object's namespace.

Admission refuses, naming the field: a selector that does not match the template's labels, an empty
MachineSet selector, a name that is not a label value, ``maxSurge``/``maxUnavailable`` that are neither an
integer nor a percentage (and both 0), a version that is not a semantic version, a change of
``spec.clusterName``, and a template with ``bootstrap.configRef``: capa-py has no bootstrap provider to
clone a bootstrap config template from, so a templated Machine must name its bootstrap Secret
(``bootstrap.dataSecretName``).
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field, WithJsonSchema

from capa_py.api.cluster import CLUSTER_API_VERSION, CLUSTER_NAME_LABEL
from capa_py.api.immutable import immutable
from capa_py.api.machine_template import (
    SUFFIX_ALPHABET,
    MachineTemplateMetadata,
    MachineTemplateSpec,
    ReplicatedSpec,
    default_replicated,
    encode_digest,
    template_hash,
    template_issues,
)
from capa_py.api.meta import Condition, FieldIssue, KubeModel, KubeObject
from capa_py.api.tinkerbell_capi import LabelSelector

# -- the names Cluster API core writes (labels, annotations, finalizers): one place to correct them ----
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
"""On a MachineSet and its Machines: the MachineDeployment they belong to."""
SET_NAME_LABEL = "cluster.x-k8s.io/set-name"
"""On a Machine: the MachineSet that made it."""
TEMPLATE_HASH_LABEL = "machine-template-hash"
"""On a MachineSet, in its selector and on its Machines: which template of the MachineDeployment."""
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
"""On a Machine: delete it before any other when its MachineSet scales down."""
CLONED_FROM_NAME_ANNOTATION = "cluster.x-k8s.io/cloned-from-name"
CLONED_FROM_GROUPKIND_ANNOTATION = "cluster.x-k8s.io/cloned-from-groupkind"
REVISION_ANNOTATION = "machinedeployment.clusters.x-k8s.io/revision"
DESIRED_REPLICAS_ANNOTATION = "machinedeployment.clusters.x-k8s.io/desired-replicas"
DISABLE_MACHINE_CREATE_ANNOTATION = "cluster.x-k8s.io/disable-machine-create"
"""On a MachineSet a MachineDeployment made: ``"false"`` (Cluster API core sets it; capa-py reads it too)."""
MAX_REPLICAS_ANNOTATION = "machinedeployment.clusters.x-k8s.io/max-replicas"
MACHINE_DEPLOYMENT_FINALIZER = "cluster.x-k8s.io/machinedeployment"
MACHINE_SET_FINALIZER = "cluster.x-k8s.io/machineset"

DEFAULT_REVISION_HISTORY_LIMIT = 1
DEFAULT_PROGRESS_DEADLINE_SECONDS = 600
DeletePolicy = Literal["Random", "Newest", "Oldest"]
StrategyType = Literal["RollingUpdate", "OnDelete"]

IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]
"""A Kubernetes ``intstr.IntOrString``: an integer, or a percentage such as ``"25%"``."""

_PERCENT = re.compile(r"^(0|[1-9][0-9]*)%$")


def scaled_value(value: IntOrString, total: int, round_up: bool) -> int:
    """An IntOrString against ``total``: the integer, or the percentage of ``total`` rounded up or down
    (ValueError when it is neither)."""
    if isinstance(value, int):
        return value
    match = _PERCENT.match(value)
    if match is None:
        raise ValueError(
            f"invalid value for IntOrString: invalid type: string is not a percentage: {value!r}"
        )
    percent = int(match.group(1))
    whole, rest = divmod(percent * total, 100)
    return whole + (1 if round_up and rest else 0)


def template_hash_label(digest: str, suffix: str) -> str:
    """The ``machine-template-hash`` label of a MachineSet named ``<deployment>-<suffix>`` for the template
    of hash ``digest``: ``<digest>-<suffix>``, as Cluster API core writes it."""
    return f"{digest}-{suffix}"


def template_of(machine_set: KubeObject) -> str | None:
    """The template hash a MachineSet's ``machine-template-hash`` label holds (None when unlabelled)."""
    label = machine_set.metadata.labels.get(TEMPLATE_HASH_LABEL)
    return label.rpartition("-")[0] or label if label else None


def _issue(path: str, message: str) -> FieldIssue:
    return FieldIssue(path=path, message=message)


class MachineRollingUpdateDeployment(KubeModel):
    max_unavailable: IntOrString | None = None
    max_surge: IntOrString | None = None
    delete_policy: DeletePolicy | None = None


class MachineDeploymentStrategy(KubeModel):
    type: StrategyType | None = None
    rolling_update: MachineRollingUpdateDeployment | None = None


# -- MachineDeployment -----------------------------------------------------------------------------
class MachineDeploymentSpec(ReplicatedSpec):
    selector: LabelSelector = Field(default_factory=LabelSelector)
    strategy: MachineDeploymentStrategy | None = None
    revision_history_limit: int | None = Field(default=None, ge=0)
    paused: bool = False
    progress_deadline_seconds: int | None = Field(default=None, ge=0)

    @property
    def strategy_type(self) -> StrategyType:
        return (self.strategy.type if self.strategy else None) or "RollingUpdate"

    def surge_and_unavailable(self) -> tuple[int, int]:
        """``maxSurge`` (rounded up) and ``maxUnavailable`` (rounded down) against the desired replicas;
        when both come to 0, maxUnavailable is 1 (as Deployments resolve them)."""
        rolling = self.strategy.rolling_update if self.strategy else None
        surge_value: IntOrString = 1 if rolling is None or rolling.max_surge is None else rolling.max_surge
        unavailable_value: IntOrString = (
            0 if rolling is None or rolling.max_unavailable is None else rolling.max_unavailable
        )
        surge = scaled_value(surge_value, self.desired, round_up=True)
        unavailable = scaled_value(unavailable_value, self.desired, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, min(unavailable, self.desired)

    @property
    def delete_policy(self) -> DeletePolicy | None:
        rolling = self.strategy.rolling_update if self.strategy else None
        return rolling.delete_policy if rolling else None


MachineDeploymentPhase = Literal["ScalingUp", "ScalingDown", "Running", "Failed", "Unknown"]


class MachineDeploymentStatus(KubeModel):
    observed_generation: int | None = None
    selector: str | None = None
    replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    unavailable_replicas: int = 0
    phase: MachineDeploymentPhase | None = None
    conditions: list[Condition] = Field(default_factory=list)


class MachineDeployment(KubeObject):
    """A set of identical worker Machines kept at a replica count and rolled out to a new template through
    MachineSets, one per template."""

    API_VERSION: ClassVar[str] = CLUSTER_API_VERSION
    KIND: ClassVar[str] = "MachineDeployment"
    PLURAL: ClassVar[str] = "machinedeployments"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("md",)

    spec: MachineDeploymentSpec
    status: MachineDeploymentStatus = Field(default_factory=MachineDeploymentStatus)

    def _default(self) -> None:
        spec = self.spec
        default_replicated(self, spec)
        if spec.revision_history_limit is None:
            spec.revision_history_limit = DEFAULT_REVISION_HISTORY_LIMIT
        if spec.progress_deadline_seconds is None:
            spec.progress_deadline_seconds = DEFAULT_PROGRESS_DEADLINE_SECONDS
        if spec.min_ready_seconds is None:
            spec.min_ready_seconds = 0
        if spec.strategy is None:
            spec.strategy = MachineDeploymentStrategy()
        if spec.strategy.type is None:
            spec.strategy.type = "RollingUpdate"
        if spec.strategy.type == "RollingUpdate":
            if spec.strategy.rolling_update is None:
                spec.strategy.rolling_update = MachineRollingUpdateDeployment()
            if spec.strategy.rolling_update.max_surge is None:
                spec.strategy.rolling_update.max_surge = 1
            if spec.strategy.rolling_update.max_unavailable is None:
                spec.strategy.rolling_update.max_unavailable = 0
        if not spec.selector.match_labels and not spec.selector.match_expressions:
            spec.selector.match_labels[DEPLOYMENT_NAME_LABEL] = self.name
            spec.template.metadata.labels[DEPLOYMENT_NAME_LABEL] = self.name
        spec.selector.match_labels[CLUSTER_NAME_LABEL] = spec.cluster_name

    def prepare_for_create(self) -> None:
        self._default()

    def prepare_for_update(self) -> None:
        self._default()

    def semantic_issues(self) -> list[FieldIssue]:
        """Checked as Cluster API's validating webhook checks it: after defaulting (a request ``capa
        serve`` admits is judged as the object it will store)."""
        if self.being_deleted:
            return []
        defaulted = self.model_copy(deep=True)
        defaulted._default()
        return defaulted._issues()

    def _issues(self) -> list[FieldIssue]:
        found = template_issues(self, self.spec.selector, self.spec.template)
        rolling = self.spec.strategy.rolling_update if self.spec.strategy else None
        if rolling is not None:
            values: dict[str, int] = {}
            for name, value in (("maxSurge", rolling.max_surge), ("maxUnavailable", rolling.max_unavailable)):
                if value is None:
                    continue
                try:
                    values[name] = scaled_value(value, self.spec.desired, round_up=True)
                except ValueError as exc:
                    found.append(
                        _issue(
                            f"spec.strategy.rollingUpdate.{name}",
                            f"must be either an int or a percentage: {exc}",
                        )
                    )
                    continue
                if values[name] < 0:
                    found.append(_issue(f"spec.strategy.rollingUpdate.{name}", "must not be negative"))
            if values.get("maxSurge") == 0 and values.get("maxUnavailable") == 0:
                found.append(
                    _issue(
                        "spec.strategy.rollingUpdate.maxUnavailable",
                        "may not be 0 when maxSurge is 0",
                    )
                )
        return found

    def immutable_issues(self, old: MachineDeployment) -> list[FieldIssue]:
        return immutable("spec.clusterName", old.spec.cluster_name, self.spec.cluster_name)

    def settled(self) -> bool | None:
        """Done when the controller has seen this generation and every desired Machine runs the current
        template and is ready (no old ones left)."""
        status = self.status
        desired = self.spec.desired
        return (
            status.observed_generation is not None
            and self.metadata.generation is not None
            and status.observed_generation >= self.metadata.generation
            and status.replicas == desired
            and status.updated_replicas == desired
            and status.ready_replicas == desired
        )


# -- MachineSet ------------------------------------------------------------------------------------
class MachineSetSpec(ReplicatedSpec):
    delete_policy: DeletePolicy | None = None
    selector: LabelSelector = Field(default_factory=LabelSelector)


class MachineSetStatus(KubeModel):
    selector: str | None = None
    replicas: int = 0
    fully_labeled_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    observed_generation: int | None = None
    failure_reason: str | None = None
    failure_message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


class MachineSet(KubeObject):
    """Machines made from one template, kept at a replica count."""

    API_VERSION: ClassVar[str] = CLUSTER_API_VERSION
    KIND: ClassVar[str] = "MachineSet"
    PLURAL: ClassVar[str] = "machinesets"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ms",)

    spec: MachineSetSpec
    status: MachineSetStatus = Field(default_factory=MachineSetStatus)

    def _default(self) -> None:
        spec = self.spec
        default_replicated(self, spec)
        if spec.delete_policy is None:
            spec.delete_policy = "Random"
        if not spec.selector.match_labels and not spec.selector.match_expressions:
            spec.selector.match_labels[SET_NAME_LABEL] = self.name
            spec.template.metadata.labels[SET_NAME_LABEL] = self.name
        spec.selector.match_labels[CLUSTER_NAME_LABEL] = spec.cluster_name

    def prepare_for_create(self) -> None:
        self._default()

    def prepare_for_update(self) -> None:
        self._default()

    def semantic_issues(self) -> list[FieldIssue]:
        """Checked after defaulting, as for a MachineDeployment."""
        if self.being_deleted:
            return []
        defaulted = self.model_copy(deep=True)
        defaulted._default()
        found = template_issues(defaulted, defaulted.spec.selector, defaulted.spec.template)
        if not defaulted.spec.selector.match_labels and not defaulted.spec.selector.match_expressions:
            found.append(_issue("spec.selector", "empty selector is not valid for MachineSet."))
        return found

    def immutable_issues(self, old: MachineSet) -> list[FieldIssue]:
        return immutable("spec.clusterName", old.spec.cluster_name, self.spec.cluster_name)

    def settled(self) -> bool | None:
        status = self.status
        desired = self.spec.desired
        return (
            status.observed_generation is not None
            and self.metadata.generation is not None
            and status.observed_generation >= self.metadata.generation
            and status.replicas == desired
            and status.ready_replicas == desired
        )


MACHINE_SET_KINDS: tuple[type[KubeObject], ...] = (MachineDeployment, MachineSet)

__all__ = [
    "CLONED_FROM_GROUPKIND_ANNOTATION",
    "CLONED_FROM_NAME_ANNOTATION",
    "DEFAULT_PROGRESS_DEADLINE_SECONDS",
    "DEFAULT_REVISION_HISTORY_LIMIT",
    "DELETE_MACHINE_ANNOTATION",
    "DEPLOYMENT_NAME_LABEL",
    "DESIRED_REPLICAS_ANNOTATION",
    "DISABLE_MACHINE_CREATE_ANNOTATION",
    "MACHINE_DEPLOYMENT_FINALIZER",
    "MACHINE_SET_FINALIZER",
    "MACHINE_SET_KINDS",
    "MAX_REPLICAS_ANNOTATION",
    "REVISION_ANNOTATION",
    "SET_NAME_LABEL",
    "SUFFIX_ALPHABET",
    "TEMPLATE_HASH_LABEL",
    "DeletePolicy",
    "IntOrString",
    "MachineDeployment",
    "MachineDeploymentPhase",
    "MachineDeploymentSpec",
    "MachineDeploymentStatus",
    "MachineDeploymentStrategy",
    "MachineRollingUpdateDeployment",
    "MachineSet",
    "MachineSetSpec",
    "MachineSetStatus",
    "MachineTemplateMetadata",
    "MachineTemplateSpec",
    "StrategyType",
    "encode_digest",
    "scaled_value",
    "template_hash",
    "template_hash_label",
    "template_of",
]
