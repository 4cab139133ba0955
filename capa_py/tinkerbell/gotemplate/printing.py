"""Go's ``fmt`` for template values: ``Sprint``, ``Sprintln`` and ``Sprintf`` with Go's verbs, flags,
widths, precisions, argument indexes and its ``%!verb(type=value)`` error notation.

Values are the runtime values of ``values`` (plain, not boxed: callers open boxes first). Floats use
Go's ``strconv`` formatting: the shortest digits that round-trip for ``%v``, exact decimal rounding
otherwise (Python's ``Decimal`` of a float is exact, so rounding agrees with Go's).

The formatting of one operand is :mod:`~capa_py.tinkerbell.gotemplate.verbs`; floats' digits are
:mod:`~capa_py.tinkerbell.gotemplate.floatfmt`.
"""

from __future__ import annotations

from typing import Any

from capa_py.tinkerbell.gotemplate.floatfmt import format_float
from capa_py.tinkerbell.gotemplate.values import GoUint8, concrete_type_name, is_int, to_bytes
from capa_py.tinkerbell.gotemplate.verbs import (
    LDIGITS,
    MAX_RUNE,
    UDIGITS,
    Flags,
    Formatter,
    rune_count,
)

__all__ = ["LDIGITS", "MAX_RUNE", "UDIGITS", "format_float", "rune_count", "sprint", "sprintf", "sprintln"]


class _Printer(Formatter):
    """Go's ``fmt.pp``: each template value printed under a verb, and ``Printf``'s format string."""

    # -- dispatch ---------------------------------------------------------------------------------
    def bad_verb(self, value: Any, verb: str, *, has_value: bool = True) -> None:
        self.buf.append("%!" + verb + "(")
        if has_value and value is not None:
            self.buf.append(concrete_type_name(value) + "=")
            self.print_arg(value, "v")
        else:
            self.buf.append("<nil>")
        self.buf.append(")")

    def print_arg(self, arg: Any, verb: str) -> None:
        if arg is None:
            if verb in "Tv":
                self.pad("<nil>")
            else:
                self.bad_verb(None, verb)
            return
        if verb == "T":
            self.fmt_s(concrete_type_name(arg))
            return
        if verb == "w":
            self.bad_verb(arg, verb)
            return
        self.print_value(arg, verb, 0)

    def print_value(self, value: Any, verb: str, depth: int) -> None:
        f = self.f
        if isinstance(value, bool):
            if verb in "tv":
                self.pad("true" if value else "false")
            else:
                self.bad_verb(value, verb)
        elif is_int(value):
            self.print_integer(value, verb)
        elif isinstance(value, float):
            if verb == "v":
                self.fmt_float(value, "g", -1)
            elif verb in "bgGxX":
                self.fmt_float(value, verb, -1)
            elif verb in "feE":
                self.fmt_float(value, verb, 6)
            elif verb == "F":
                self.fmt_float(value, "f", 6)
            else:
                self.bad_verb(value, verb)
        elif isinstance(value, complex):
            if verb in "vbgGxXfFeE":
                old_plus = f.plus
                self.buf.append("(")
                self.print_value(value.real, verb, depth)
                f.plus = True
                self.print_value(value.imag, verb, depth)
                self.buf.append("i)")
                f.plus = old_plus
            else:
                self.bad_verb(value, verb)
        elif isinstance(value, str):
            if verb == "v":
                if f.sharp_v:
                    self.fmt_q(value)
                else:
                    self.fmt_s(value)
            elif verb == "s":
                self.fmt_s(value)
            elif verb in "xX":
                self.fmt_sx(value, LDIGITS if verb == "x" else UDIGITS)
            elif verb == "q":
                self.fmt_q(value)
            else:
                self.bad_verb(value, verb)
        elif isinstance(value, dict):
            if f.sharp_v:
                self.buf.append("map[string]interface {}{")
            else:
                self.buf.append("map[")
            for i, key in enumerate(sorted(value, key=to_bytes)):
                if i > 0:
                    self.buf.append(", " if f.sharp_v else " ")
                self.print_value(key, verb, depth + 1)
                self.buf.append(":")
                self.print_element(value[key], verb, depth + 1)
            self.buf.append("}" if f.sharp_v else "]")
        elif isinstance(value, list):
            self.buf.append("[]interface {}{" if f.sharp_v else "[")
            for i, item in enumerate(value):
                if i > 0:
                    self.buf.append(", " if f.sharp_v else " ")
                self.print_element(item, verb, depth + 1)
            self.buf.append("}" if f.sharp_v else "]")
        else:
            raise TypeError(f"not a template value: {type(value).__name__}")

    def print_element(self, item: Any, verb: str, depth: int) -> None:
        """An element of a map or slice of ``interface {}``: a nil one prints as ``<nil>``."""
        if item is None:
            self.buf.append("interface {}(nil)" if self.f.sharp_v else "<nil>")
            return
        self.print_value(item, verb, depth)

    def print_integer(self, value: int, verb: str) -> None:
        signed = not isinstance(value, GoUint8)
        if verb == "v":
            if self.f.sharp_v and not signed:
                sharp = self.f.sharp
                self.f.sharp = True
                self.fmt_integer(value, 16, False, "v", LDIGITS)
                self.f.sharp = sharp
            else:
                self.fmt_integer(value, 10, signed, verb, LDIGITS)
        elif verb == "d":
            self.fmt_integer(value, 10, signed, verb, LDIGITS)
        elif verb == "b":
            self.fmt_integer(value, 2, signed, verb, LDIGITS)
        elif verb in "oO":
            self.fmt_integer(value, 8, signed, verb, LDIGITS)
        elif verb == "x":
            self.fmt_integer(value, 16, signed, verb, LDIGITS)
        elif verb == "X":
            self.fmt_integer(value, 16, signed, verb, UDIGITS)
        elif verb == "c":
            self.fmt_c(value & 0xFFFFFFFFFFFFFFFF)
        elif verb == "q":
            self.fmt_qc(value & 0xFFFFFFFFFFFFFFFF)
        elif verb == "U":
            self.fmt_unicode(value & 0xFFFFFFFFFFFFFFFF)
        else:
            self.bad_verb(value, verb)

    # -- Printf -----------------------------------------------------------------------------------
    def do_printf(self, fmt: str, args: list[Any]) -> None:
        end = len(fmt)
        arg_num = 0
        after_index = False
        self.reordered = False
        i = 0
        while i < end:
            self.good_arg_num = True
            last = i
            while i < end and fmt[i] != "%":
                i += 1
            if i > last:
                self.buf.append(fmt[last:i])
            if i >= end:
                break
            i += 1
            self.f = Flags()
            simple = False
            while i < end:
                c = fmt[i]
                if c == "#":
                    self.f.sharp = True
                elif c == "0":
                    self.f.zero = True
                elif c == "+":
                    self.f.plus = True
                elif c == "-":
                    self.f.minus = True
                elif c == " ":
                    self.f.space = True
                else:
                    if "a" <= c <= "z" and arg_num < len(args):
                        if c in "vw":
                            self.f.sharp_v, self.f.sharp = self.f.sharp, False
                            self.f.plus_v, self.f.plus = self.f.plus, False
                        self.print_arg(args[arg_num], c)
                        arg_num += 1
                        i += 1
                        simple = True
                    break
                i += 1
            if simple:
                continue
            arg_num, i, after_index = self.arg_number(arg_num, fmt, i, len(args))
            if i < end and fmt[i] == "*":
                i += 1
                self.f.wid, self.f.wid_present, arg_num = _int_from_arg(args, arg_num)
                if not self.f.wid_present:
                    self.buf.append("%!(BADWIDTH)")
                if self.f.wid < 0:
                    self.f.wid = -self.f.wid
                    self.f.minus = True
                    self.f.zero = False
                after_index = False
            else:
                self.f.wid, self.f.wid_present, i = _parsenum(fmt, i, end)
                if after_index and self.f.wid_present:
                    self.good_arg_num = False
            if i + 1 < end and fmt[i] == ".":
                i += 1
                if after_index:
                    self.good_arg_num = False
                arg_num, i, after_index = self.arg_number(arg_num, fmt, i, len(args))
                if i < end and fmt[i] == "*":
                    i += 1
                    self.f.prec, self.f.prec_present, arg_num = _int_from_arg(args, arg_num)
                    if self.f.prec < 0:
                        self.f.prec = 0
                        self.f.prec_present = False
                    if not self.f.prec_present:
                        self.buf.append("%!(BADPREC)")
                    after_index = False
                else:
                    self.f.prec, self.f.prec_present, i = _parsenum(fmt, i, end)
                    if not self.f.prec_present:
                        self.f.prec = 0
                        self.f.prec_present = True
            if not after_index:
                arg_num, i, after_index = self.arg_number(arg_num, fmt, i, len(args))
            if i >= end:
                self.buf.append("%!(NOVERB)")
                break
            verb = fmt[i]
            i += 1
            if verb == "%":
                self.buf.append("%")
            elif not self.good_arg_num:
                self.buf.append("%!" + verb + "(BADINDEX)")
            elif arg_num >= len(args):
                self.buf.append("%!" + verb + "(MISSING)")
            else:
                if verb in "vw":
                    self.f.sharp_v, self.f.sharp = self.f.sharp, False
                    self.f.plus_v, self.f.plus = self.f.plus, False
                self.print_arg(args[arg_num], verb)
                arg_num += 1
        if not self.reordered and arg_num < len(args):
            self.f = Flags()
            self.buf.append("%!(EXTRA ")
            for n, arg in enumerate(args[arg_num:]):
                if n > 0:
                    self.buf.append(", ")
                if arg is None:
                    self.buf.append("<nil>")
                else:
                    self.buf.append(concrete_type_name(arg) + "=")
                    self.print_arg(arg, "v")
            self.buf.append(")")

    def arg_number(self, arg_num: int, fmt: str, i: int, num_args: int) -> tuple[int, int, bool]:
        if len(fmt) <= i or fmt[i] != "[":
            return arg_num, i, False
        self.reordered = True
        index, wid, ok = _parse_arg_number(fmt[i:])
        if ok and 0 <= index < num_args:
            return index, i + wid, True
        self.good_arg_num = False
        return arg_num, i + wid, ok


def _parse_arg_number(fmt: str) -> tuple[int, int, bool]:
    if len(fmt) < 3:
        return 0, 1, False
    for i in range(1, len(fmt)):
        if fmt[i] == "]":
            width, ok, newi = _parsenum(fmt, 1, i)
            if not ok or newi != i:
                return 0, i + 1, False
            return width - 1, i + 1, True
    return 0, 1, False


def _too_large(x: int) -> bool:
    return x > 1_000_000 or x < -1_000_000


def _parsenum(s: str, start: int, end: int) -> tuple[int, bool, int]:
    if start >= end:
        return 0, False, end
    num = 0
    isnum = False
    newi = start
    while newi < end and "0" <= s[newi] <= "9":
        if _too_large(num):
            return 0, False, end
        num = num * 10 + int(s[newi])
        isnum = True
        newi += 1
    return num, isnum, newi


def _int_from_arg(args: list[Any], arg_num: int) -> tuple[int, bool, int]:
    num, is_num, new = 0, False, arg_num
    if arg_num < len(args):
        value = args[arg_num]
        if is_int(value) and -(1 << 63) <= value < (1 << 63):
            num, is_num = int(value), True
        new = arg_num + 1
        if _too_large(num):
            num, is_num = 0, False
    return num, is_num, new


# -- public ---------------------------------------------------------------------------------------------
def sprint(args: list[Any]) -> str:
    """``fmt.Sprint``: spaces between operands when neither side is a string."""
    p = _Printer()
    prev_string = False
    for n, arg in enumerate(args):
        is_string = isinstance(arg, str)
        if n > 0 and not is_string and not prev_string:
            p.buf.append(" ")
        p.print_arg(arg, "v")
        prev_string = is_string
    return "".join(p.buf)


def sprintln(args: list[Any]) -> str:
    p = _Printer()
    for n, arg in enumerate(args):
        if n > 0:
            p.buf.append(" ")
        p.print_arg(arg, "v")
    p.buf.append("\n")
    return "".join(p.buf)


def sprintf(fmt: str, args: list[Any]) -> str:
    p = _Printer()
    p.do_printf(fmt, args)
    return "".join(p.buf)
