"""How Go values are represented while a template runs.

Data is JSON-like and decoded the way Kubernetes decodes it for Go: ``dict`` is ``map[string]interface {}``,
``list`` is ``[]interface {}``, ``str`` is ``string``, ``bool`` is ``bool``, ``float`` is ``float64`` and
``int`` is ``int64``. Values the template itself makes have other Go types: integer constants, ``len`` and
range indexes are ``int`` (``GoInt``), indexing a string gives a byte (``GoUint8``). ``None`` is a nil
``interface {}``.

``Boxed`` marks a value read out of a map or a slice: Go holds it as an ``interface {}`` until a pipeline
unwraps it, which changes how some errors name its type. ``NO_VALUE`` is Go's invalid ``reflect.Value``
(what a pipeline yields for a nil interface; printed ``<no value>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


class GoInt(int):
    """A Go ``int`` (as opposed to a plain Python int, which is an ``int64`` from the data)."""

    __slots__ = ()


class GoUint8(int):
    """A Go ``uint8``: a byte of a string, from ``index``."""

    __slots__ = ()


class _NoValue:
    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Final = _NoValue()


class _Missing:
    """The "no final argument" marker of a pipeline's first command."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class Boxed:
    """A value held in an ``interface {}`` (from a map or a slice); ``value`` None is a nil interface."""

    value: Any


def type_name(value: Any) -> str:
    """Go's ``reflect.Type.String()`` of a runtime value."""
    if isinstance(value, Boxed):
        return "interface {}"
    return concrete_type_name(value)


def concrete_type_name(value: Any) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, GoInt):
        return "int"
    if isinstance(value, GoUint8):
        return "uint8"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    raise TypeError(f"not a template value: {type(value).__name__}")


def unbox(value: Any) -> Any:
    """Go's ``indirectInterface``: the value inside an interface; a nil interface becomes NO_VALUE."""
    if isinstance(value, Boxed):
        return NO_VALUE if value.value is None else value.value
    return value


def as_interface(value: Any) -> Any:
    """What a function taking ``interface {}`` (``any``) receives: NO_VALUE is nil, boxes are opened."""
    if value is NO_VALUE:
        return None
    if isinstance(value, Boxed):
        return value.value
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def byte_len(s: str) -> int:
    return len(to_bytes(s))


def to_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def from_bytes(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")
