"""The kind registry: from ``apiVersion``/``kind`` or a name a user types to the model class.

Names resolve as ``kubectl`` resolves them: plural, singular, short name or kind, case-insensitively,
optionally qualified by group (``awsclusters.infrastructure.cluster.x-k8s.io``).
"""

from __future__ import annotations

from typing import Any

from pydantic import create_model

from capa_py.api.meta import KubeObject


class UnknownKind(LookupError):
    """No registered kind matches the name or apiVersion/kind given."""


class KindRegistry:
    def __init__(self) -> None:
        self._by_gvk: dict[tuple[str, str], type[KubeObject]] = {}

    def register(self, model: type[KubeObject]) -> type[KubeObject]:
        if not model.API_VERSION or not model.KIND or not model.PLURAL:
            raise ValueError(f"{model.__name__} must set API_VERSION, KIND and PLURAL")
        self._by_gvk[(model.API_VERSION, model.KIND)] = model
        return model

    def define(
        self,
        api_version: str,
        kind: str,
        plural: str | None = None,
        namespaced: bool = True,
        short_names: tuple[str, ...] = (),
    ) -> type[KubeObject]:
        """Register a schemaless kind (free-form ``spec`` and ``status``) and return its model."""
        model = create_model(
            kind,
            __base__=KubeObject,
            spec=(dict[str, Any], {}),
            status=(dict[str, Any], {}),
        )
        model.API_VERSION = api_version
        model.KIND = kind
        model.PLURAL = plural or kind.lower() + "s"
        model.NAMESPACED = namespaced
        model.SHORT_NAMES = short_names
        return self.register(model)

    def for_gvk(self, api_version: str, kind: str) -> type[KubeObject]:
        try:
            return self._by_gvk[(api_version, kind)]
        except KeyError:
            known = ", ".join(sorted(f"{av}/{k}" for av, k in self._by_gvk))
            raise UnknownKind(f"unknown kind {api_version}/{kind} (known: {known})") from None

    def resolve(self, name: str) -> type[KubeObject]:
        """The model for a name as a user types it (``awsclusters``, ``Cluster``, ``cl``)."""
        lowered = name.lower()
        resource, _, group = lowered.partition(".")
        for (api_version, _kind), model in self._by_gvk.items():
            model_group = api_version.rpartition("/")[0] if "/" in api_version else ""
            if group and group != model_group:
                continue
            names = {model.PLURAL, model.KIND.lower(), *model.SHORT_NAMES}
            if resource in names:
                return model
        known = ", ".join(sorted(m.PLURAL for m in self._by_gvk.values()))
        raise UnknownKind(f"unknown kind {name!r} (known: {known})")

    def kinds(self) -> list[type[KubeObject]]:
        return list(self._by_gvk.values())

    def __contains__(self, model: object) -> bool:
        return isinstance(model, type) and self._by_gvk.get((model.API_VERSION, model.KIND)) is model  # type: ignore[attr-defined]


def default_registry() -> KindRegistry:
    """A registry with every kind capa-py ships."""
    from capa_py.api.admission_kinds import ADMISSION_KINDS
    from capa_py.api.apiextensions import CustomResourceDefinition
    from capa_py.api.aws import AWSCluster, AWSMachine
    from capa_py.api.aws_identity import IDENTITY_KINDS
    from capa_py.api.aws_templates import AWS_TEMPLATE_KINDS
    from capa_py.api.cluster import Cluster, Machine
    from capa_py.api.clusterconfig import ClusterConfig
    from capa_py.api.coordination import Lease
    from capa_py.api.core import ConfigMap, Event, Namespace, Secret
    from capa_py.api.machinepool import MACHINE_POOL_KINDS
    from capa_py.api.machinesets import MACHINE_SET_KINDS
    from capa_py.api.tinkerbell import TINKERBELL_KINDS
    from capa_py.api.tinkerbell_capi import TINKERBELL_CAPI_KINDS
    from capa_py.api.workloads import WORKLOAD_KINDS

    registry = KindRegistry()
    kinds: tuple[type[KubeObject], ...] = (
        Cluster,
        Machine,
        *MACHINE_SET_KINDS,
        *MACHINE_POOL_KINDS,
        Secret,
        Namespace,
        ConfigMap,
        Event,
        AWSCluster,
        AWSMachine,
        *AWS_TEMPLATE_KINDS,
        *IDENTITY_KINDS,
        Lease,
        CustomResourceDefinition,
        *WORKLOAD_KINDS,
        *ADMISSION_KINDS,
        *TINKERBELL_KINDS,
        *TINKERBELL_CAPI_KINDS,
        ClusterConfig,
    )
    for model in kinds:
        registry.register(model)
    return registry


REGISTRY = default_registry()
"""The process-wide registry. Later providers register their kinds here on import."""
