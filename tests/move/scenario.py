"""The stores a move test starts from: an AWS cluster (``demo``) and a bare-metal cluster (``lab``) in
``default``, with the Hardware, Template and Workflow a TinkerbellMachine of ``lab`` owns, the clusters'
kubeconfig Secrets, a Secret labelled for ``lab``, and objects of no cluster (a free Hardware, a Secret)."""

from __future__ import annotations

from pathlib import Path

from capa_py.api.core import Secret
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    TinkerbellMachine,
)
from capa_py.operations import apply_objects
from capa_py.store.protocol import ObjectStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

UNRELATED = {("Hardware", "default", "spare"), ("Secret", "default", "unrelated")}


def _secret(name: str, labels: dict[str, str] | None = None) -> Secret:
    return Secret.model_validate(
        {"metadata": {"name": name, "namespace": "default", "labels": labels or {}}, "stringData": {"k": "v"}}
    )


def populate(store: ObjectStore) -> None:
    """Apply the scenario to ``store``."""
    objects: list[KubeObject] = load_manifests(
        [
            EXAMPLES / "aws-cluster-machines.yaml",
            EXAMPLES / "tinkerbell-cluster-machines.yaml",
            EXAMPLES / "tinkerbell" / "hardware.yaml",
        ]
    )
    apply_objects(store, objects)
    spare = store.get(Hardware, "machine1", "default").model_copy(deep=True)
    spare.metadata = type(spare.metadata)(name="spare", namespace="default")
    store.create(spare)

    machine = store.get(TinkerbellMachine, "lab-cp-0", "default")
    machine.spec.hardware_name = "machine1"
    machine = store.update(machine)
    hardware = store.get(Hardware, "machine1", "default")
    hardware.metadata.labels.update(
        {HARDWARE_OWNER_NAME_LABEL: "lab-cp-0", HARDWARE_OWNER_NAMESPACE_LABEL: "default"}
    )
    store.update(hardware)
    owner = machine.owner_reference()
    for template_or_workflow in load_manifests(
        [EXAMPLES / "tinkerbell" / "template.yaml", EXAMPLES / "tinkerbell" / "workflow.yaml"]
    ):
        assert isinstance(template_or_workflow, Template | Workflow)
        template_or_workflow.metadata.name = "lab-cp-0"
        template_or_workflow.metadata.owner_references = [owner]
        if isinstance(template_or_workflow, Workflow):
            template_or_workflow.spec.template_ref.name = "lab-cp-0"
        store.create(template_or_workflow)

    store.create(_secret("demo-kubeconfig"))
    store.create(_secret("lab-kubeconfig"))
    store.create(_secret("lab-extra", {"cluster.x-k8s.io/cluster-name": "lab"}))
    store.create(_secret("unrelated"))


def keys(objects: list[KubeObject]) -> set[tuple[str, str | None, str]]:
    return {(o.kind, o.namespace, o.name) for o in objects}
