"""The template functions: Go's builtins and Tinkerbell's four, with their Go parameter types.

Go checks and converts each argument against the function's parameter type before the call; the types
used here are ``VALUE`` (a ``reflect.Value``: passed as is), ``ANY`` (``interface {}``), ``STRING`` and
``INT``. A function raises ``FuncError`` with Go's message; the executor prefixes ``error calling NAME:``.
Truth and the comparison functions are :mod:`~capa_py.tinkerbell.gotemplate.compare`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from capa_py.tinkerbell.gotemplate.compare import eq, ge, gt, is_true, le, lt, ne, negate
from capa_py.tinkerbell.gotemplate.errors import FuncError
from capa_py.tinkerbell.gotemplate.lex import is_print
from capa_py.tinkerbell.gotemplate.printing import sprint, sprintf, sprintln
from capa_py.tinkerbell.gotemplate.values import (
    NO_VALUE,
    Boxed,
    GoInt,
    GoSlice,
    GoUint8,
    byte_len,
    from_bytes,
    is_int,
    to_bytes,
    type_name,
    unbox,
)

__all__ = [
    "BUILTINS",
    "TINKERBELL_FUNCS",
    "Func",
    "FuncError",
    "ParamType",
    "format_partition",
    "is_true",
]


class ParamType(Enum):
    VALUE = "reflect.Value"
    ANY = "interface {}"
    STRING = "string"
    INT = "int"


@dataclass(frozen=True)
class Func:
    name: str
    params: tuple[ParamType, ...]
    variadic: bool
    impl: Callable[..., Any]
    builtin: bool = True


# -- index, slice, len ------------------------------------------------------------------------------
def _index_arg(index: Any, cap: int) -> int:
    if index is NO_VALUE:
        raise FuncError("cannot index slice/array with nil")
    if not is_int(index) or isinstance(index, bool):
        raise FuncError(f"cannot index slice/array with type {type_name(index)}")
    if index < 0 or index > cap:
        raise FuncError(f"index out of range: {index}")
    return int(index)


def _index(item: Any, *indexes: Any) -> Any:
    item = unbox(item)
    if item is NO_VALUE:
        raise FuncError("index of untyped nil")
    for raw in indexes:
        index = unbox(raw)
        if isinstance(item, Boxed):
            if item.value is None:
                raise FuncError("index of nil pointer")
            item = item.value
        if isinstance(item, (list, str)):
            length = len(item) if isinstance(item, list) else byte_len(item)
            x = _index_arg(index, length)
            if x == length:
                # Go's reflect panics here, and text/template reports the panic
                kind = "slice" if isinstance(item, list) else "string"
                raise FuncError(f"reflect: {kind} index out of range")
            item = Boxed(item[x]) if isinstance(item, list) else GoUint8(to_bytes(item)[x])
        elif isinstance(item, dict):
            if index is NO_VALUE:
                raise FuncError("value is nil; should be of type string")
            if not isinstance(index, str):
                raise FuncError(f"value has type {type_name(index)}; should be string")
            item = Boxed(item.get(index))
        else:
            raise FuncError(f"can't index item of type {type_name(item)}")
    return item


def _slice(item: Any, *indexes: Any) -> Any:
    item = unbox(item)
    if item is NO_VALUE:
        raise FuncError("slice of untyped nil")
    if len(indexes) > 3:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    if isinstance(item, str):
        if len(indexes) == 3:
            raise FuncError("cannot 3-index slice a string")
        cap = byte_len(item)
    elif isinstance(item, list):
        cap = item.cap if isinstance(item, GoSlice) else len(item)
    else:
        raise FuncError(f"can't slice item of type {type_name(item)}")
    idx = [0, byte_len(item) if isinstance(item, str) else len(item), 0]
    for i, index in enumerate(indexes):
        idx[i] = _index_arg(unbox(index), cap)
    if idx[0] > idx[1]:
        raise FuncError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise FuncError(f"invalid slice index: {idx[1]} > {idx[2]}")
    if isinstance(item, str):
        return from_bytes(to_bytes(item)[idx[0] : idx[1]])
    if not isinstance(item, GoSlice):
        item = GoSlice.decoded(item)
    return item.window(idx[0], idx[1], idx[2] if len(indexes) == 3 else cap)


def _len(item: Any) -> GoInt:
    if isinstance(item, Boxed):
        if item.value is None:
            raise FuncError("len of nil pointer")
        item = item.value
    if isinstance(item, str):
        return GoInt(byte_len(item))
    if isinstance(item, (list, dict)):
        return GoInt(len(item))
    if item is NO_VALUE:
        # Go's reflect panics asking an invalid value for its type
        raise FuncError("reflect: call of reflect.Value.Type on zero Value")
    raise FuncError(f"len of type {type_name(item)}")


def _call(name: str, fn: Any, *args: Any) -> Any:
    fn = unbox(fn)
    if fn is NO_VALUE:
        raise FuncError("call of nil")
    # data never holds a function
    raise FuncError(f"non-function {name} of type {type_name(fn)}")


# -- escaping ---------------------------------------------------------------------------------------
def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return sprint(["<no value>" if a is None else a for a in args])


def _html(*args: Any) -> str:
    s = _eval_args(args)
    out = []
    for ch in s:
        out.append(
            {"\0": "\ufffd", '"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;"}.get(ch, ch)
        )
    return "".join(out)


def _js(*args: Any) -> str:
    s = _eval_args(args)
    out = []
    special = {
        "\\": "\\\\",
        "'": "\\'",
        '"': '\\"',
        "<": "\\u003C",
        ">": "\\u003E",
        "&": "\\u0026",
        "=": "\\u003D",
    }
    for ch in s:
        code = ord(ch)
        if ch in special:
            out.append(special[ch])
        elif code < 0x20:
            out.append(f"\\u00{code:02X}")
        elif code < 0x80:
            out.append(ch)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(ch)  # a byte that is not UTF-8 decodes as U+FFFD, printable: Go copies the byte
        elif not is_print(ch):
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return "".join(out)


def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(to_bytes(_eval_args(args)), safe="-_.~")


def _print(*args: Any) -> str:
    return sprint(list(args))


def _println(*args: Any) -> str:
    return sprintln(list(args))


def _printf(fmt: str, *args: Any) -> str:
    return sprintf(fmt, list(args))


# -- Tinkerbell's -----------------------------------------------------------------------------------
def _contains(s: str, substr: str) -> bool:
    return substr in s


def _has_prefix(s: str, prefix: str) -> bool:
    return s.startswith(prefix)


def _has_suffix(s: str, suffix: str) -> bool:
    return s.endswith(suffix)


def format_partition(dev: str, partition: int) -> str:
    """Tinkerbell's ``formatPartition``: NVMe devices take a ``p`` before the number; sd, vd, xvd and hd
    devices take the number directly; any other device path is returned unchanged."""
    if dev.startswith("/dev/nvme"):
        return f"{dev}p{partition}"
    if dev.startswith(("/dev/sd", "/dev/vd", "/dev/xvd", "/dev/hd")):
        return f"{dev}{partition}"
    return dev


V, A, S, N = ParamType.VALUE, ParamType.ANY, ParamType.STRING, ParamType.INT


def _and_or(*_: Any) -> Any:  # evaluated lazily by the executor
    raise AssertionError("and/or are evaluated by the executor")


BUILTINS: dict[str, Func] = {
    f.name: f
    for f in (
        Func("and", (V, V), True, _and_or),
        Func("call", (V, V), True, _call),
        Func("html", (A,), True, _html),
        Func("index", (V, V), True, _index),
        Func("slice", (V, V), True, _slice),
        Func("js", (A,), True, _js),
        Func("len", (V,), False, _len),
        Func("not", (V,), False, negate),
        Func("or", (V, V), True, _and_or),
        Func("print", (A,), True, _print),
        Func("printf", (S, A), True, _printf),
        Func("println", (A,), True, _println),
        Func("urlquery", (A,), True, _urlquery),
        Func("eq", (V, V), True, eq),
        Func("ge", (V, V), False, ge),
        Func("gt", (V, V), False, gt),
        Func("le", (V, V), False, le),
        Func("lt", (V, V), False, lt),
        Func("ne", (V, V), False, ne),
    )
}

TINKERBELL_FUNCS: dict[str, Func] = {
    f.name: f
    for f in (
        Func("contains", (S, S), False, _contains, builtin=False),
        Func("hasPrefix", (S, S), False, _has_prefix, builtin=False),
        Func("hasSuffix", (S, S), False, _has_suffix, builtin=False),
        Func("formatPartition", (S, N), False, format_partition, builtin=False),
    )
}
