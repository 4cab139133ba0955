"""Every AWS machine has an image to launch: its ``spec.ami.id``, or a Kubernetes version to look one up by.

An AWSMachine alone cannot tell: the version is its Machine's ``spec.version`` (a MachineDeployment's or a
MachineSet's ``spec.template.spec.version`` for the AWSMachineTemplate it stamps machines out of).
:func:`image_source_issues` checks the machines a manifest declares (their infrastructure from the manifest,
else from the store) before anything is stored or any AWS call is made (``capa apply``, :func:`~capa_py.
operations.apply_objects`); the AWSMachine controller refuses the same (``MissingAMI``) for objects that
arrive by other ways (kubectl, one by one).
"""

from __future__ import annotations

from collections.abc import Sequence

from capa_py.api.aws import AWSMachine
from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.cluster import Machine
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore

Target = AWSMachine | AWSMachineTemplate


def _target(
    store: ObjectStore, objects: Sequence[KubeObject], kind: type[Target], name: str, namespace: str
) -> Target | None:
    """The AWSMachine or AWSMachineTemplate a reference names: the manifest's, else the store's."""
    for obj in objects:
        if isinstance(obj, kind) and obj.name == name and (obj.metadata.namespace or "default") == namespace:
            return obj
    try:
        return store.get(kind, name, namespace)
    except StoreError:  # not there (yet), or a store that cannot say: the controller checks it later
        return None


def _ami(target: Target) -> str | None:
    if isinstance(target, AWSMachine):
        return target.spec.ami.id
    return target.spec.template.spec.ami.id


def image_source_issues(store: ObjectStore, objects: Sequence[KubeObject]) -> list[str]:
    """Why machines ``objects`` declare would have no image: a Machine, MachineDeployment or MachineSet
    of the manifest without a version naming an AWSMachine or AWSMachineTemplate (of the manifest or the
    store) without ``ami.id``."""
    problems: list[str] = []
    for owner in objects:
        if isinstance(owner, Machine):
            spec, version_field = owner.spec, "spec.version"
        elif isinstance(owner, MachineDeployment | MachineSet):
            spec, version_field = owner.spec.template.spec, "spec.template.spec.version"
        else:
            continue
        ref = spec.infrastructure_ref
        kinds: dict[str | None, type[Target]] = {
            "AWSMachine": AWSMachine,
            "AWSMachineTemplate": AWSMachineTemplate,
        }
        if spec.version or ref.kind not in kinds or not ref.name:
            continue
        namespace = ref.namespace or owner.metadata.namespace or "default"
        target = _target(store, objects, kinds[ref.kind], ref.name, namespace)
        if target is None or _ami(target):
            continue
        ami_field = "spec.ami.id" if isinstance(target, AWSMachine) else "spec.template.spec.ami.id"
        problems.append(
            f"{owner.KIND} {owner.metadata.namespace or 'default'}/{owner.name}: {version_field} is required "
            f"when its {target.KIND} {target.name} has no {ami_field} (an AMI is looked up by the Kubernetes "
            "version): set one of them"
        )
    return problems
