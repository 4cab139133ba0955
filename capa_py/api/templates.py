"""Infrastructure templates: the objects Cluster API's cloning controllers stamp infrastructure out of.

A MachineDeployment, a MachineSet or a KubeadmControlPlane does not name an AWSMachine: it names an
``AWSMachineTemplate`` and makes a new AWSMachine from it for every Machine, copying ``spec.template.spec``
into the new object's ``spec`` and ``spec.template.metadata`` (labels and annotations only, Cluster API's
``ObjectMeta`` for templates) into its metadata. A ClusterClass does the same with an ``AWSClusterTemplate``.

Every template kind here derives from :class:`InfrastructureTemplate`, which gives it what the providers'
webhooks give theirs:

- the templated spec is validated as the kind it stamps out would be, each issue named under
  ``spec.template.spec`` (an AWSMachineTemplate whose spec would be refused as an AWSMachine is refused);
- fields that belong to one instance only (:attr:`InfrastructureTemplate.INSTANCE_ONLY_FIELDS`: an
  AWSMachine's ``providerID``, a TinkerbellMachine's ``hardwareName``) are refused: every clone would get
  the same value;
- ``spec`` never changes after create: an update is refused naming each changed field (a new template is
  made instead, and the MachineDeployment pointed at it). The template object's own metadata (labels,
  annotations, finalizers, owners) stays mutable.

:attr:`InfrastructureTemplate.TEMPLATED_KIND` names the kind a template stamps out and
:meth:`InfrastructureTemplate.instantiate` makes one, for a cloning controller.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator

from capa_py.api.immutable import immutable
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject, validate_labels

TEMPLATED_SPEC_PATH = "spec.template.spec"
"""Where a template holds the spec of the objects it stamps out."""

INSTANCE_ONLY_MESSAGE = "cannot be set in templates"
"""The providers' words for a field set in a template that only one instance can carry."""

TOPOLOGY_DRY_RUN_ANNOTATION = "topology.cluster.x-k8s.io/dry-run"
"""Set by Cluster API's topology controller on the templates it sends in dry-run requests: it computes what a
changed template would be, and rotates to a new template when it differs."""


class TemplateObjectMeta(KubeModel):
    """Cluster API's ``ObjectMeta`` for templates: the labels and annotations every object stamped out of
    the template is given."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_labels(value)


class TemplateResource(KubeModel):
    """``spec.template``: the metadata of each object stamped out; kinds add ``spec``, the stamped-out
    object's spec."""

    metadata: TemplateObjectMeta = Field(default_factory=TemplateObjectMeta)

    def templated_spec(self) -> KubeModel:
        spec = getattr(self, "spec", None)
        if not isinstance(spec, KubeModel):
            raise TypeError(f"{type(self).__name__} has no spec model")
        return spec


class InfrastructureTemplate(KubeObject):
    """Base of every template kind: subclasses set :attr:`TEMPLATED_KIND` and :attr:`TEMPLATED_MODEL` and
    a ``spec`` whose ``template`` is a :class:`TemplateResource`."""

    TEMPLATED_KIND: ClassVar[str] = ""
    """The kind this template stamps out (``AWSMachine`` for an AWSMachineTemplate), in the template's own
    API version."""
    TEMPLATED_MODEL: ClassVar[type[KubeObject]]
    INSTANCE_ONLY_FIELDS: ClassVar[tuple[str, ...]] = ()
    """Wire names of templated spec fields only one instance can carry: refused in a template."""
    HAS_STATUS: ClassVar[bool] = False

    def resource(self) -> TemplateResource:
        """``spec.template``."""
        template = getattr(getattr(self, "spec", None), "template", None)
        if not isinstance(template, TemplateResource):
            raise TypeError(f"{type(self).__name__}.spec has no template")
        return template

    def instantiate(self, name: str = "", namespace: str | None = None) -> KubeObject:
        """A new, unsaved object of the templated kind: ``spec.template.spec`` as its spec and
        ``spec.template.metadata``'s labels and annotations as its own, in ``namespace`` (the template's
        when not given). Everything else a cloning controller sets (owner references, the cluster-name
        label, generateName) is left to it."""
        resource = self.resource()
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace if namespace is not None else self.metadata.namespace,
            "labels": dict(resource.metadata.labels),
            "annotations": dict(resource.metadata.annotations),
        }
        spec = resource.templated_spec().model_dump(mode="json", by_alias=True)
        return self.TEMPLATED_MODEL.model_validate({"metadata": metadata, "spec": spec})

    def semantic_issues(self) -> list[FieldIssue]:
        """The templated spec judged as the stamped-out kind judges its own (each path moved under
        ``spec.template.spec``), and the instance-only fields set."""
        instance = self.instantiate(namespace=self.metadata.namespace)
        instance.metadata.deletion_timestamp = self.metadata.deletion_timestamp
        issues = [
            FieldIssue(path=TEMPLATED_SPEC_PATH + issue.path.removeprefix("spec"), message=issue.message)
            if issue.path == "spec" or issue.path.startswith(("spec.", "spec["))
            else issue
            for issue in instance.semantic_issues()
        ]
        if self.being_deleted:
            return issues
        spec = self.resource().templated_spec().model_dump(mode="json", by_alias=True)
        return [
            FieldIssue(path=f"{TEMPLATED_SPEC_PATH}.{name}", message=INSTANCE_ONLY_MESSAGE)
            for name in self.INSTANCE_ONLY_FIELDS
            if _field(spec, name) not in (None, "")
        ] + issues

    def skips_immutability(self, dry_run: bool) -> bool:
        """A dry run by Cluster API's topology controller (annotated :data:`TOPOLOGY_DRY_RUN_ANNOTATION`)
        may change the spec, as the providers' webhooks let it: nothing is written."""
        return dry_run and TOPOLOGY_DRY_RUN_ANNOTATION in self.metadata.annotations

    def immutable_issues(self, old: InfrastructureTemplate) -> list[FieldIssue]:
        """The providers' rule: a template's spec never changes once created (each changed field named)."""
        return immutable(
            "spec.template",
            old.resource(),
            self.resource(),
            why=f"immutable: {self.KIND}.spec cannot change after create",
        )


def _field(spec: dict[str, Any], dotted: str) -> Any:
    """A (wire-named, dotted: ``cloudInit.secretPrefix``) field of a dumped spec; None when absent."""
    value: Any = spec
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
