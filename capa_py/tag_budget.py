"""The tags of a machine's instance fit within AWS's limit of 50 per resource.

An instance carries its AWSCluster's ``additionalTags`` merged with its AWSMachine's (the machine's value
wins for a key both set), plus up to :data:`~capa_py.api.aws.OWN_TAGS` of capa-py's own. Each object alone
is checked when it loads (:func:`capa_py.api.aws.check_tags`); :func:`tag_budget_issues` checks the merge
across objects, for a manifest against a store, before anything is stored or any AWS call is made; the
AWSMachine controller checks the same (:func:`merged_tag_issue`) for objects that arrive one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from capa_py.api.aws import MAX_TAGS, MAX_USER_TAGS, OWN_TAGS, AWSCluster, AWSMachine
from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster, Machine
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.store.protocol import ObjectStore

Key = tuple[str, str]
"""(namespace, name)"""
_T = TypeVar("_T", bound=KubeObject)


def merged_tag_issue(cluster_tags: Mapping[str, str], machine_tags: Mapping[str, str]) -> str | None:
    """Why an instance cannot carry ``cluster_tags`` merged with ``machine_tags``; None when it can."""
    merged = len({**cluster_tags, **machine_tags})
    if merged <= MAX_USER_TAGS:
        return None
    return (
        f"{merged} additional tags with its AWSCluster's ({len(machine_tags)} of its own, "
        f"{len(cluster_tags)} of the AWSCluster's): at most {MAX_USER_TAGS} (AWS allows {MAX_TAGS} per "
        f"resource and capa-py adds up to {OWN_TAGS} of its own)"
    )


def _key(obj: KubeObject) -> Key:
    return (obj.metadata.namespace or "default", obj.name)


@dataclass
class _Objects:
    """The manifest's objects over the store's: a manifest object replaces the stored one of its name."""

    clusters: dict[Key, Cluster]
    awsclusters: dict[Key, AWSCluster]
    machines: dict[Key, AWSMachine]
    templates: dict[Key, AWSMachineTemplate]
    owners: list[Machine | MachineDeployment | MachineSet]

    @classmethod
    def of(cls, store: ObjectStore, objects: Sequence[KubeObject]) -> _Objects:
        def merged(kind: type[_T]) -> dict[Key, _T]:
            found = {_key(o): o for o in store.list(kind)}
            found.update({_key(o): o for o in objects if isinstance(o, kind)})
            return found

        owners: list[Machine | MachineDeployment | MachineSet] = [
            *merged(Machine).values(),
            *merged(MachineDeployment).values(),
            *merged(MachineSet).values(),
        ]
        return cls(
            merged(Cluster), merged(AWSCluster), merged(AWSMachine), merged(AWSMachineTemplate), owners
        )

    def cluster_of(self, obj: AWSMachine | AWSMachineTemplate) -> str | None:
        """The Cluster name a machine (or template) belongs to: its label, else the Cluster API object that
        references it."""
        labelled = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
        if labelled:
            return labelled
        namespace = obj.metadata.namespace or "default"
        for owner in self.owners:
            if (owner.metadata.namespace or "default") != namespace:
                continue
            ref = (
                owner.spec.infrastructure_ref
                if isinstance(owner, Machine)
                else owner.spec.template.spec.infrastructure_ref
            )
            if ref.kind == obj.KIND and ref.name == obj.name:
                return owner.spec.cluster_name
        return None

    def awscluster_of(self, namespace: str, cluster_name: str) -> AWSCluster | None:
        cluster = self.clusters.get((namespace, cluster_name))
        ref = cluster.spec.infrastructure_ref if cluster is not None else None
        if ref is not None and ref.kind == AWSCluster.KIND:
            return self.awsclusters.get((ref.namespace or namespace, ref.name or ""))
        return self.awsclusters.get((namespace, cluster_name))


def _machine_tags(obj: AWSMachine | AWSMachineTemplate) -> dict[str, str]:
    if isinstance(obj, AWSMachineTemplate):
        return dict(obj.spec.template.spec.additional_tags)
    return dict(obj.spec.additional_tags)


def tag_budget_issues(store: ObjectStore, objects: Sequence[KubeObject]) -> list[str]:
    """Why ``objects`` may not be applied to ``store``: each AWSMachine or AWSMachineTemplate whose tags,
    merged with its AWSCluster's, are more than an instance may carry. A machine counts when it or its
    AWSCluster is among ``objects`` (a changed AWSCluster is checked against its stored machines)."""
    everything = _Objects.of(store, objects)
    touched_clusters = {_key(o) for o in objects if isinstance(o, AWSCluster)}
    touched = {(o.KIND, *_key(o)) for o in objects if isinstance(o, AWSMachine | AWSMachineTemplate)}
    candidates: Iterable[AWSMachine | AWSMachineTemplate] = [
        *everything.machines.values(),
        *everything.templates.values(),
    ]
    problems: list[str] = []
    for obj in candidates:
        namespace = obj.metadata.namespace or "default"
        cluster_name = everything.cluster_of(obj)
        if cluster_name is None:
            continue
        awscluster = everything.awscluster_of(namespace, cluster_name)
        if awscluster is None:
            continue
        if (obj.KIND, namespace, obj.name) not in touched and _key(awscluster) not in touched_clusters:
            continue
        issue = merged_tag_issue(awscluster.spec.additional_tags, _machine_tags(obj))
        if issue is not None:
            problems.append(
                f"{obj.KIND} {namespace}/{obj.name}: spec.additionalTags: {issue} "
                f"(AWSCluster {namespace}/{awscluster.name})"
            )
    return problems
