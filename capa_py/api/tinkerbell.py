"""Tinkerbell kinds (``tinkerbell.org/v1alpha2``): Hardware, OSIE, Template and Workflow.

The fields are the Tinkerbell CRD refactor's v1alpha2 design, in camelCase on the wire. Additions beyond that
design, each because a behaviour the design asks for needs it:

- ``Template.spec.actions[].timeout`` (seconds, 0 = the controller's default): the supervisor fails a
  workflow whose action runs longer than its timeout.
- ``Workflow.status.actions[name].index``: the action's position in the template. Actions run in that
  order; the actions are a map keyed by name, and a map's order does not survive an API server.
- ``Workflow.status.currentAction``, ``status.lastTransitionTime`` (when ``state`` last changed, which the
  Scheduled timeout counts from) and ``status.conditions`` (``Prepared``).

Only the kinds and their fields live here; what is valid beyond the field types is in ``semantic_issues``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from capa_py.api.meta import Condition, KubeModel, KubeObject, Time

TINKERBELL_API_VERSION = "tinkerbell.org/v1alpha2"
WORKFLOW_FINALIZER = "workflow.tinkerbell.org"

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


class Hardware(KubeObject):
    """A machine that can run Workflows."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "Hardware"
    PLURAL: ClassVar[str] = "hardware"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("hw",)
    HAS_STATUS: ClassVar[bool] = False

    spec: HardwareSpec = Field(default_factory=HardwareSpec)


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


# -- Template ---------------------------------------------------------------------------------------
class Action(KubeModel):
    name: str
    image: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    volumes: list[str] = Field(default_factory=list)
    network_namespace: str | None = None
    timeout: int | None = None


class TemplateSpec(KubeModel):
    actions: list[Action] = Field(default_factory=list)
    volumes: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class Template(KubeObject):
    """The actions a Workflow runs, each field a Go ``text/template``."""

    API_VERSION: ClassVar[str] = TINKERBELL_API_VERSION
    KIND: ClassVar[str] = "Template"
    PLURAL: ClassVar[str] = "templates"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tpl",)
    HAS_STATUS: ClassVar[bool] = False

    spec: TemplateSpec = Field(default_factory=TemplateSpec)


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


TINKERBELL_KINDS: tuple[type[KubeObject], ...] = (Hardware, OSIE, Template, Workflow)
