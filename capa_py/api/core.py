"""Core (``v1``) kinds: the bootstrap data Secret providers read, and Namespace."""

from __future__ import annotations

import base64
import binascii
from typing import ClassVar

from pydantic import Field, field_validator

from capa_py.api.meta import KubeModel, KubeObject


class Secret(KubeObject):
    """A ``v1`` Secret. ``data`` values are base64 on the wire, as in Kubernetes.

    Secrets carry bootstrap user data: never log their content.
    """

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Secret"
    PLURAL: ClassVar[str] = "secrets"
    HAS_STATUS: ClassVar[bool] = False

    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict)
    immutable: bool | None = None

    @field_validator("data")
    @classmethod
    def _check_base64(cls, value: dict[str, str]) -> dict[str, str]:
        for key, encoded in value.items():
            try:
                base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"data[{key!r}] is not valid base64") from exc
        return value

    def normalise(self) -> None:
        """Fold ``stringData`` into ``data`` as the API server does on write."""
        for key, value in self.string_data.items():
            self.data[key] = base64.b64encode(value.encode()).decode()
        self.string_data = {}

    def value(self, key: str) -> bytes:
        """The decoded value of one key (``stringData`` first, as it wins on write)."""
        if key in self.string_data:
            return self.string_data[key].encode()
        if key not in self.data:
            raise KeyError(f"{self.ref()} has no key {key!r}")
        return base64.b64decode(self.data[key])


class NamespaceSpec(KubeModel):
    finalizers: list[str] = Field(default_factory=list)


class NamespaceStatus(KubeModel):
    phase: str | None = None


class Namespace(KubeObject):
    """A ``v1`` Namespace, stored so that ``kubectl create namespace`` and ``get namespaces`` work.

    Nothing checks that a namespaced object's namespace exists (there is no namespace lifecycle).
    """

    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Namespace"
    PLURAL: ClassVar[str] = "namespaces"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ns",)
    NAMESPACED: ClassVar[bool] = False

    spec: NamespaceSpec = Field(default_factory=NamespaceSpec)
    status: NamespaceStatus = Field(default_factory=NamespaceStatus)
