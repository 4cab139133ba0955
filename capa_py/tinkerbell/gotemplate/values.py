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


class GoSlice(list[Any]):
    """A Go ``[]interface {}``: a window onto a backing array that may extend past its length.

    ``slice`` may reach past a slice's length up to its capacity (Go's ``s[1:4]`` of a 3-element slice with
    capacity 4 is valid and shows the array's fourth element), so a slice keeps its backing array, its
    offset into it and its capacity. Decoded JSON arrays get the capacity Go's ``append`` growth gives them.
    """

    backing: list[Any]
    offset: int
    cap: int

    @classmethod
    def decoded(cls, items: list[Any]) -> GoSlice:
        out = cls(items)
        out.cap = _append_capacity(len(items))
        out.backing = [*items, *([None] * (out.cap - len(items)))]
        out.offset = 0
        return out

    def window(self, low: int, high: int, cap: int) -> GoSlice:
        """``s[low:high:cap]``, indexes relative to this slice (``high`` and ``cap`` up to ``self.cap``)."""
        start = self.offset + low
        out = GoSlice(self.backing[start : self.offset + high])
        out.backing = self.backing
        out.offset = start
        out.cap = cap - low
        return out


def _append_capacity(n: int) -> int:
    """The capacity of a ``[]interface {}`` built by appending ``n`` elements one at a time (as encoding/json
    decodes an array): doubling up to 256 elements, then Go's gentler growth rounded to allocation sizes."""
    cap = 0
    while cap < n:
        if cap == 0:
            cap = 1
        elif cap < 256:
            cap *= 2
        else:
            cap += (cap + 3 * 256) // 4
            cap = _round_to_size_class(cap * 16) // 16
    return cap


def _round_to_size_class(size: int) -> int:
    if size > 32768:
        return -(-size // 8192) * 8192
    classes = (
        4096,
        4864,
        5376,
        6144,
        6528,
        6784,
        6912,
        8192,
        9472,
        9728,
        10240,
        10880,
        12288,
        13568,
        14336,
        16384,
        18432,
        19072,
        20480,
        21760,
        24576,
        27264,
        28672,
        32768,
    )
    for c in classes:
        if size <= c:
            return c
    return size


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
    if isinstance(value, complex):
        return "complex128"
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
