"""Tinkerbell kinds (``tinkerbell.org/v1alpha2``): Hardware, OSIE, Template and Workflow.

The fields are the Tinkerbell CRD refactor's v1alpha2 design, in camelCase on the wire. Additions beyond that
design, each because a behaviour the design asks for needs it:

- ``Template.spec.actions[].timeout`` (seconds, 0 = the controller's default): the supervisor fails a
  workflow whose action runs longer than its timeout.
- ``Workflow.status.actions[name].index``: the action's position in the template. Actions run in that
  order; the actions are a map keyed by name, and a map's order does not survive an API server.
- ``Workflow.status.currentAction``, ``status.lastTransitionTime`` (when ``state`` last changed, which the
  Scheduled timeout counts from) and ``status.conditions`` (``Prepared``).
- ``Hardware.spec.agentCredentialsRef``: the Secret (in the Hardware's namespace) whose ``token`` key the
  Hardware's agent presents to the workflow server (:mod:`capa_py.tinkerbell.agentauth`).
- ``Template.spec.envValueFrom`` and ``spec.actions[].envValueFrom``: env values read from a Secret of the
  Workflow's namespace when the workflow is sent to its agent; the workflow's status keeps the reference,
  never the value.

Only the kinds and their fields live here; what is valid beyond the field types is in ``semantic_issues``
(rules in :mod:`capa_py.api.tinkerbell_checks`) and, for a Workflow, ``immutable_issues``. As for the AWS
kinds, these are not field validators, so an object stored before a rule existed stays readable. The one
exception rewrites without refusing: a Hardware's MAC keys are normalised to lowercase colon form on read
(idempotent), except keys that would collide, which are kept as written for ``semantic_issues`` to name.

Netboot: ``disableDhcp`` implies ``disableNetboot``. An interface with ``disableDhcp: true`` and
``disableNetboot: false`` is accepted, and does not netboot: :attr:`NetworkInterface.effective_netboot` is
what every component asks.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from capa_py.api import tinkerbell_checks as checks
from capa_py.api.immutable import changes
from capa_py.api.meta import Condition, FieldIssue, KubeModel, KubeObject, Time

TINKERBELL_API_VERSION = "tinkerbell.org/v1alpha2"
WORKFLOW_FINALIZER = "workflow.tinkerbell.org"
RENDER_FAILED = "RenderFailed"
"""The reason of a workflow whose template failed to render."""

WorkflowState = Literal["Pending", "Scheduled", "Running", "Succeeded", "Failed", "Cancelling", "Canceled"]
ActionState = Literal["Pending", "Running", "Succeeded", "Failed", "Canceled"]
END_STATES: frozenset[str] = frozenset({"Succeeded", "Failed", "Canceled"})


class LocalObjectReference(KubeModel):
    """A reference by name; an empty namespace means the referring object's namespace."""

    name: str
    namespace: str | None = None


# -- Hardware ---------------------------------------------------------------------------------------
class DHCP(KubeModel):
    ip: str
    netmask: str
    gateway: str | None = None
    hostname: str | None = None
    vlan_id: int | None = None
    nameservers: list[str] = Field(default_factory=list)
    timeservers: list[str] = Field(default_factory=list)
    lease_time: int | None = None


class NetworkInterface(KubeModel):
    dhcp: DHCP | None = None
    disable_dhcp: bool = False
    disable_netboot: bool = False

    @property
    def effective_netboot(self) -> bool:
        """Whether the interface netboots: DHCP on (``disableDhcp`` implies ``disableNetboot``) and netboot
        not disabled."""
        return not self.disable_dhcp and not self.disable_netboot


class IPXE(KubeModel):
    inline: str | None = None
    url: str | None = None


class HardwareOSIE(KubeModel):
    osie_ref: LocalObjectReference | None = None
    kernel_params: list[str] = Field(default_factory=list)


class Instance(KubeModel):
    userdata: str | None = None
    vendordata: str | None = None


class HardwareSpec(KubeModel):
    network_interfaces: dict[str, NetworkInterface] = Field(default_factory=dict)
    ipxe: IPXE | None = None
    osie: HardwareOSIE | None = None
    instance: Instance | None = None
    storage_devices: list[str] = Field(default_factory=list)
    bmc_ref: LocalObjectReference | None = None
    agent_credentials_ref: LocalObjectReference | None = None
    """The Secret (its ``namespace`` must be empty or the Hardware's) holding the agent's ``token``."""

    @field_validator("network_interfaces", mode="before")
    @classmethod
    def _normalise_macs(cls, value: Any) -> Any:
        """MAC keys in lowercase colon form; a key that does not parse, or whose normal form another key
        shares, stays as written (``semantic_issues`` names it)."""
        if not isinstance(value, dict):
            return value
        normal = {key: checks.normalise_mac(key) if isinstance(key, str) else None for key in value}
        counts: dict[str | None, int] = {}
        for mac in normal.values():
            counts[mac] = counts.get(mac, 0) + 1
        return {
            (normal[key] if normal[key] is not None and counts[normal[key]] == 1 else key): interface
            for key, interface in value.items()
        }


class Hardware(KubeObject):
    """A machine that can run Workflows."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "Hardware"
    PLURAL: ClassVar[str] = "hardware"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hw",)
    HAS_STATUS: ClassVar[bool] = False

    spec: HardwareSpec = Field(default_factory=HardwareSpec)

    def semantic_issues(self) -> list[FieldIssue]:
        return checks.hardware_issues(self.spec)


# -- OSIE -------------------------------------------------------------------------------------------
class OSIESpec(KubeModel):
    kernel_url: str
    initrd_url: str


class OSIE(KubeObject):
    """An Operating System Installation Environment Hardware netboots (its kernel and initrd)."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "OSIE"
    PLURAL: ClassVar[str] = "osies"
    HAS_STATUS: ClassVar[bool] = False

    spec: OSIESpec

    def semantic_issues(self) -> list[FieldIssue]:
        return checks.osie_issues(self.spec)


# -- Template ---------------------------------------------------------------------------------------
class SecretKeySelector(KubeModel):
    """One key of a Secret in the Workflow's namespace."""

    name: str
    key: str


class EnvVarSource(KubeModel):
    """Where an env value comes from (as a Pod's ``env[].valueFrom``; only ``secretKeyRef``)."""

    secret_key_ref: SecretKeySelector


class Action(KubeModel):
    name: str
    image: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_value_from: dict[str, EnvVarSource] = Field(default_factory=dict)
    """Env values read from Secrets when the workflow is sent to its agent (a name here wins over
    ``env``); rendered status keeps these references, never the values."""
    volumes: list[str] = Field(default_factory=list)
    network_namespace: str | None = None
    timeout: int | None = None


class TemplateSpec(KubeModel):
    actions: list[Action] = Field(default_factory=list)
    volumes: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_value_from: dict[str, EnvVarSource] = Field(default_factory=dict)


class Template(KubeObject):
    """The actions a Workflow runs, each field a Go ``text/template``."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "Template"
    PLURAL: ClassVar[str] = "templates"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tpl",)
    HAS_STATUS: ClassVar[bool] = False

    spec: TemplateSpec = Field(default_factory=TemplateSpec)

    def semantic_issues(self) -> list[FieldIssue]:
        return checks.template_issues(self.spec)


# -- Workflow ---------------------------------------------------------------------------------------
class WorkflowSpec(KubeModel):
    hardware_ref: LocalObjectReference
    template_ref: LocalObjectReference
    template_data: dict[str, Any] = Field(default_factory=dict)
    timeout: int = 0


class ActionStatus(KubeModel):
    rendered: Action
    index: int
    started_at: Time | None = None
    state: ActionState = "Pending"
    reason: str | None = None
    message: str | None = None


class WorkflowStatus(KubeModel):
    actions: dict[str, ActionStatus] = Field(default_factory=dict)
    started_at: Time | None = None
    state: WorkflowState | None = None
    reason: str | None = None
    message: str | None = None
    current_action: str | None = None
    last_transition_time: Time | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class Workflow(KubeObject):
    """One run of a Template's actions on one Hardware."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "Workflow"
    PLURAL: ClassVar[str] = "workflows"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("wf",)

    spec: WorkflowSpec
    status: WorkflowStatus = Field(default_factory=WorkflowStatus)

    def ordered_actions(self) -> list[tuple[str, ActionStatus]]:
        """The rendered actions in the order they run."""
        return sorted(self.status.actions.items(), key=lambda item: item[1].index)

    @property
    def started(self) -> bool:
        """Whether the workflow may have reached an agent: from then on its spec is fixed.

        A workflow still Pending with no action begun has not, nor has one that failed to render (it was
        never offered to an agent: fixing its spec prepares it again)."""
        status = self.status
        if status.started_at is not None or any(a.state != "Pending" for a in status.actions.values()):
            return True
        if status.state in (None, "Pending"):
            return False
        return not (status.state == "Failed" and status.reason == RENDER_FAILED)

    def failure(self) -> tuple[str, str | None] | None:
        if self.status.state != "Failed":
            return None
        return (self.status.reason or "Unknown", self.status.message)

    def settled(self) -> bool:
        """Settled once prepared (a failure is :meth:`failure`'s): running it is an agent's business, not a
        wait's. A prepared workflow whose hardware or template has gone since waits for them again."""
        if self.status.state is None:
            return False
        prepared = next((c for c in self.status.conditions if c.type == "Prepared"), None)
        return prepared is None or prepared.status == "True"

    def semantic_issues(self) -> list[FieldIssue]:
        # A workflow being deleted only loses its finalizer: a rule added since it was stored must not
        # keep it from going.
        return [] if self.being_deleted else checks.workflow_issues(self.spec)

    def immutable_issues(self, old: Workflow) -> list[FieldIssue]:
        """The whole spec is fixed once ``old`` has started (an agent may be running its actions)."""
        if not old.started:
            return []
        changed = [path for path, _, _ in changes("spec", old.spec, self.spec)]
        if not changed:
            return []
        state = old.status.state or "Pending"
        message = f"immutable once the workflow has started (state {state}); changed: {', '.join(changed)}"
        return [FieldIssue(path="spec", message=message)]


TINKERBELL_KINDS: tuple[type[KubeObject], ...] = (Hardware, OSIE, Template, Workflow)
