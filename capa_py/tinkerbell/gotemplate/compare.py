"""Truth and comparison in templates, as Go's ``text/template`` has them: ``isTrue`` (the zero value of a
type is false), ``not``, and ``eq``, ``ne``, ``lt``, ``le``, ``gt`` and ``ge`` over basic kinds (integers
of any sign compare by value, and ``eq`` takes several operands), with Go's errors for incompatible or
non-comparable operands.
"""

from __future__ import annotations

from typing import Any

from capa_py.tinkerbell.gotemplate.errors import FuncError
from capa_py.tinkerbell.gotemplate.printing import sprintf
from capa_py.tinkerbell.gotemplate.values import (
    NO_VALUE,
    Boxed,
    GoUint8,
    is_int,
    to_bytes,
    type_name,
    unbox,
)


def is_true(value: Any) -> bool:
    """Go's ``isTrue`` for an opened value: the zero value of its type is false."""
    if value is NO_VALUE or value is None:
        return False
    if isinstance(value, Boxed):
        return value.value is not None
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return bool(value)


def _truth(value: Any) -> bool:
    return is_true(unbox(value))


def negate(arg: Any) -> bool:
    return not _truth(arg)


_BOOL, _INT, _UINT, _FLOAT, _COMPLEX, _STRING, _INVALID = (
    "bool",
    "int",
    "uint",
    "float",
    "complex",
    "string",
    "invalid",
)


def _basic_kind(value: Any) -> str:
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, GoUint8):
        return _UINT
    if is_int(value):
        return _INT
    if isinstance(value, float):
        return _FLOAT
    if isinstance(value, complex):
        return _COMPLEX
    if isinstance(value, str):
        return _STRING
    return _INVALID


def _is_nil(value: Any) -> bool:
    return value is NO_VALUE or value is None


def eq(arg1: Any, *arg2: Any) -> bool:
    arg1 = unbox(arg1)
    if not arg2:
        raise FuncError("missing argument for comparison")
    k1 = _basic_kind(arg1)
    for raw in arg2:
        arg = unbox(raw)
        k2 = _basic_kind(arg)
        truth = False
        if k1 != k2:
            if {k1, k2} == {_INT, _UINT}:
                truth = arg1 == arg
            elif arg1 is not NO_VALUE and arg is not NO_VALUE:
                raise FuncError(f"incompatible types for comparison: {type_name(arg1)} and {type_name(arg)}")
        elif k1 != _INVALID:
            truth = arg1 == arg
        else:
            # maps and slices: only comparable against nil, and an invalid value counts as nil
            if not _same_kind(arg1, arg):
                raise FuncError(
                    f"non-comparable types {_value_string(arg1, 's')}: {type_name(arg1)}, "
                    f"{type_name(arg)}: {_value_string(arg, 'v')}"
                )
            if _is_nil(arg1) or _is_nil(arg):
                truth = _is_nil(arg) == _is_nil(arg1)
            else:
                raise FuncError(f"non-comparable type {_value_string(arg, 's')}: {type_name(arg)}")
        if truth:
            return True
    return False


def _same_kind(a: Any, b: Any) -> bool:
    if a is NO_VALUE or b is NO_VALUE:
        return True
    return type(a) is type(b)


def _value_string(value: Any, verb: str) -> str:
    """``%s``/``%v`` of a ``reflect.Value`` (fmt prints the value it holds)."""
    if value is NO_VALUE:
        return "<invalid reflect.Value>"
    return sprintf("%" + verb, [value])


def ne(arg1: Any, arg2: Any) -> bool:
    return not eq(arg1, arg2)


def lt(arg1: Any, arg2: Any) -> bool:
    arg1 = unbox(arg1)
    k1 = _basic_kind(arg1)
    if k1 == _INVALID:
        raise FuncError("invalid type for comparison")
    arg2 = unbox(arg2)
    k2 = _basic_kind(arg2)
    if k2 == _INVALID:
        raise FuncError("invalid type for comparison")
    if k1 != k2:
        if {k1, k2} == {_INT, _UINT}:
            return bool(arg1 < arg2)
        raise FuncError(f"incompatible types for comparison: {type_name(arg1)} and {type_name(arg2)}")
    if k1 in (_BOOL, _COMPLEX):
        raise FuncError("invalid type for comparison")
    if k1 == _STRING:
        return to_bytes(arg1) < to_bytes(arg2)
    return bool(arg1 < arg2)


def le(arg1: Any, arg2: Any) -> bool:
    return lt(arg1, arg2) or eq(arg1, arg2)


def gt(arg1: Any, arg2: Any) -> bool:
    return not le(arg1, arg2)


def ge(arg1: Any, arg2: Any) -> bool:
    return not lt(arg1, arg2)
