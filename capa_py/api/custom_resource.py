"""Kinds served from a stored CustomResourceDefinition rather than from a model capa-py ships.

Such a kind has no Python fields beyond ``apiVersion``, ``kind`` and ``metadata``: everything else (``spec``,
``status``, any other top-level field) is kept as the document holds it, after the API server has pruned,
defaulted and validated it against the CRD's schema. Empty maps and lists stay (a custom resource's
``spec: {}`` is served back as written).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ConfigDict, create_model

from capa_py.api.meta import KubeObject, _prune_empty


class CustomResource(KubeObject):
    """Base of every kind defined by a stored CRD; stores accept these without registering them."""

    model_config = ConfigDict(extra="allow")

    def to_dict(self) -> dict[str, Any]:
        meta = self.metadata.model_dump(mode="json", by_alias=True, exclude_none=True)
        doc: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": _prune_empty(meta),
        }
        doc.update(copy.deepcopy(self.__pydantic_extra__ or {}))
        return doc


def define_custom_kind(
    api_version: str,
    kind: str,
    plural: str,
    namespaced: bool,
    has_status: bool,
    short_names: tuple[str, ...] = (),
) -> type[CustomResource]:
    """A model for one kind of a CRD, stored under ``api_version``."""
    model = create_model(kind, __base__=CustomResource)
    model.API_VERSION = api_version
    model.KIND = kind
    model.PLURAL = plural
    model.NAMESPACED = namespaced
    model.HAS_STATUS = has_status
    model.SHORT_NAMES = short_names
    return model
