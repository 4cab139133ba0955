"""The OpenAPI v3 schema of a kind served by one of capa-py's CustomResourceDefinitions, as the API server
publishes a CRD's: the CRD's structural schema (``capa manifests crds``) inline, with no named schemas for
its parts, so that ``kubectl explain`` shows the same fields and types (``Object``, ``[]Object``) on capa
serve as on a cluster with capa-py's CRDs installed; ``metadata`` refers to ObjectMeta as on the API server.
"""

from __future__ import annotations

import copy
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.manifests.crds import INSTALLED_BY_OTHERS, crd_for, group_version, is_builtin_group

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def served_by_crd(model: type[KubeObject]) -> bool:
    """Whether a cluster serves ``model`` through one of capa-py's CRDs."""
    group = group_version(model)[0]
    return not is_builtin_group(group) and group not in INSTALLED_BY_OTHERS


def crd_schema(model: type[KubeObject]) -> dict[str, Any]:
    """The kind's schema as the API server publishes it for the CRD (see the module doc)."""
    group, version = group_version(model)
    schema: dict[str, Any] = copy.deepcopy(crd_for(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema.setdefault("properties", {})["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}]
    }
    schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": model.KIND, "version": version}]
    return schema
