"""Go's ``fmt`` for template values: ``Sprint``, ``Sprintln`` and ``Sprintf`` with Go's verbs, flags,
widths, precisions, argument indexes and its ``%!verb(type=value)`` error notation.

Values are the runtime values of ``values`` (plain, not boxed: callers open boxes first). Floats use
Go's ``strconv`` formatting: the shortest digits that round-trip for ``%v``, exact decimal rounding
otherwise (Python's ``Decimal`` of a float is exact, so rounding agrees with Go's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

from capa_py.tinkerbell.gotemplate.lex import _quote_rune, go_quote, is_print
from capa_py.tinkerbell.gotemplate.values import (
    GoUint8,
    concrete_type_name,
    is_int,
    to_bytes,
)

LDIGITS = "0123456789abcdefx"
UDIGITS = "0123456789ABCDEFX"
MAX_RUNE = 0x10FFFF


@dataclass
class _Flags:
    wid_present: bool = False
    prec_present: bool = False
    minus: bool = False
    plus: bool = False
    sharp: bool = False
    space: bool = False
    zero: bool = False
    plus_v: bool = False
    sharp_v: bool = False
    wid: int = 0
    prec: int = 0


def rune_count(s: str) -> int:
    return len(s)


class _Printer:
    def __init__(self) -> None:
        self.buf: list[str] = []
        self.f = _Flags()

    # -- padding ----------------------------------------------------------------------------------
    def write_padding(self, n: int) -> None:
        if n <= 0:
            return
        self.buf.append(("0" if self.f.zero and not self.f.minus else " ") * n)

    def pad(self, s: str) -> None:
        if not self.f.wid_present or self.f.wid == 0:
            self.buf.append(s)
            return
        width = self.f.wid - rune_count(s)
        if not self.f.minus:
            self.write_padding(width)
            self.buf.append(s)
        else:
            self.buf.append(s)
            self.write_padding(width)

    def pad_no_zero(self, s: str) -> None:
        old = self.f.zero
        self.f.zero = False
        self.pad(s)
        self.f.zero = old

    # -- integers ---------------------------------------------------------------------------------
    def fmt_integer(self, u: int, base: int, signed: bool, verb: str, digits: str) -> None:
        negative = signed and u < 0
        if negative:
            u = -u
        f = self.f
        prec = 0
        if f.prec_present:
            prec = f.prec
            if prec == 0 and u == 0:
                old = f.zero
                f.zero = False
                self.write_padding(f.wid)
                f.zero = old
                return
        elif f.zero and not f.minus and f.wid_present:
            prec = f.wid
            if negative or f.plus or f.space:
                prec -= 1
        out = _to_base(u, base, digits)
        if len(out) < prec:
            out = "0" * (prec - len(out)) + out
        if f.sharp:
            if base == 2:
                out = "0b" + out
            elif base == 8:
                if out[0] != "0":
                    out = "0" + out
            elif base == 16:
                out = "0" + digits[16] + out
        if verb == "O":
            out = "0o" + out
        if negative:
            out = "-" + out
        elif f.plus:
            out = "+" + out
        elif f.space:
            out = " " + out
        self.pad_no_zero(out)

    def fmt_unicode(self, u: int) -> None:
        prec = 4
        if self.f.prec_present and self.f.prec > 4:
            prec = self.f.prec
        out = "U+" + format(u, "X").rjust(prec, "0")
        if self.f.sharp and u <= MAX_RUNE and not 0xD800 <= u <= 0xDFFF and is_print(chr(u)):
            out += " '" + chr(u) + "'"
        self.pad_no_zero(out)

    def fmt_c(self, u: int) -> None:
        self.pad(_rune_char(u))

    def fmt_qc(self, u: int) -> None:
        ch = _rune_char(u)
        self.pad("'" + _quote_rune(ch, "'", self.f.plus) + "'")

    # -- strings ----------------------------------------------------------------------------------
    def truncate(self, s: str) -> str:
        if self.f.prec_present:
            return s[: self.f.prec]
        return s

    def fmt_s(self, s: str) -> None:
        self.pad(self.truncate(s))

    def fmt_sx(self, s: str, digits: str) -> None:
        b = to_bytes(s)
        f = self.f
        length = len(b)
        if f.prec_present and f.prec < length:
            length = f.prec
        width = 2 * length
        if width > 0:
            if f.space:
                if f.sharp:
                    width *= 2
                width += length - 1
            elif f.sharp:
                width += 2
        else:
            if f.wid_present:
                self.write_padding(f.wid)
            return
        if f.wid_present and f.wid > width and not f.minus:
            self.write_padding(f.wid - width)
        out: list[str] = []
        if f.sharp:
            out.append("0" + digits[16])
        for i in range(length):
            if f.space and i > 0:
                out.append(" ")
                if f.sharp:
                    out.append("0" + digits[16])
            c = b[i]
            out.append(digits[c >> 4] + digits[c & 0xF])
        self.buf.append("".join(out))
        if f.wid_present and f.wid > width and f.minus:
            self.write_padding(f.wid - width)

    def fmt_q(self, s: str) -> None:
        s = self.truncate(s)
        if self.f.sharp and _can_backquote(s):
            self.pad("`" + s + "`")
            return
        self.pad(go_quote(s, ascii_only=self.f.plus))

    # -- floats -----------------------------------------------------------------------------------
    def fmt_float(self, v: float, verb: str, prec: int) -> None:
        f = self.f
        if f.prec_present:
            prec = f.prec
        num = format_float(v, verb, prec)
        if num[0] not in "-+":
            num = "+" + num
        if f.space and num[0] == "+" and not f.plus:
            num = " " + num[1:]
        if num[1] in "IN":
            if num[1] == "N" and not f.space and not f.plus:
                num = num[1:]
            self.pad_no_zero(num)
            return
        if f.sharp and verb != "b":
            num = _sharp_float(num, verb, prec)
        if f.plus or num[0] != "+":
            if f.zero and not f.minus and f.wid_present and f.wid > len(num):
                self.buf.append(num[0])
                self.write_padding(f.wid - len(num))
                self.buf.append(num[1:])
                return
            self.pad(num)
            return
        self.pad(num[1:])

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
            self.f = _Flags()
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
            self.f = _Flags()
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


def _to_base(u: int, base: int, digits: str) -> str:
    if u == 0:
        return "0"
    out = []
    while u:
        out.append(digits[u % base])
        u //= base
    return "".join(reversed(out))


def _rune_char(u: int) -> str:
    if u > MAX_RUNE or 0xD800 <= u <= 0xDFFF:
        return "\ufffd"
    return chr(u)


def _can_backquote(s: str) -> bool:
    for ch in s:
        code = ord(ch)
        if ch in ("`", "\ufeff") or 0xD800 <= code <= 0xDFFF:
            return False
        if (code < 0x20 and ch != "\t") or code == 0x7F:
            return False
    return True


def _sharp_float(num: str, verb: str, prec: int) -> str:
    """The ``#`` flag: always a decimal point, and for %g/%v the trailing zeros kept."""
    digits = 0
    if verb in "vgGx":
        digits = 6 if prec == -1 else prec
    tail = ""
    body = num
    has_point = False
    saw_nonzero = False
    for i in range(1, len(num)):
        c = num[i]
        if c == ".":
            has_point = True
        elif c in "pP" or (c in "eE" and verb not in "xX"):
            tail, body = num[i:], num[:i]
            break
        else:
            if c != "0":
                saw_nonzero = True
            if saw_nonzero:
                digits -= 1
    if not has_point:
        if len(body) == 2 and body[1] == "0":
            digits -= 1
        body += "."
    if digits > 0:
        body += "0" * digits
    return body + tail


# -- strconv.FormatFloat ------------------------------------------------------------------------------
def _digits_of(d: Decimal) -> tuple[str, int]:
    """Significant digits (no leading or trailing zeros) and the decimal point position of ``d`` > 0."""
    _, digit_tuple, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    s = "".join(str(x) for x in digit_tuple).lstrip("0")
    if not s:
        return "", 0
    dp = len(s) + exponent
    s = s.rstrip("0")
    return s, dp


def format_float(v: float, fmt: str, prec: int) -> str:
    """Go's ``strconv.FormatFloat(v, fmt, prec, 64)`` for fmt in ``eEfgGbxX``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    neg = math.copysign(1.0, v) < 0
    a = abs(v)
    if fmt == "b":
        return _fmt_b(neg, a)
    if fmt in "xX":
        return _fmt_x(neg, a, prec, fmt)
    shortest = prec < 0
    if a == 0:
        s, dp = "", 0
    elif shortest:
        s, dp = _digits_of(Decimal(repr(a)))
        nd = len(s)
        if fmt in "eE":
            prec = max(nd - 1, 0)
        elif fmt == "f":
            prec = max(nd - dp, 0)
        else:
            prec = nd
    else:
        with localcontext() as ctx:
            ctx.prec = 2000
            exact = Decimal(a)
            if fmt in "eE":
                places = exact.adjusted() - prec
            elif fmt == "f":
                places = -prec
            else:
                places = exact.adjusted() - (prec or 1) + 1
            rounded = exact.quantize(Decimal(1).scaleb(places), rounding=ROUND_HALF_EVEN)
            s, dp = _digits_of(rounded) if rounded else ("", 0)
    return _fmt_efg(neg, s, dp, prec, fmt, shortest)


def _fmt_efg(neg: bool, s: str, dp: int, prec: int, fmt: str, shortest: bool) -> str:
    nd = len(s)
    if fmt in "gG":
        if not shortest and prec == 0:
            prec = 1
        eprec = prec
        if eprec > nd >= dp:
            eprec = nd
        if shortest:
            eprec = 6
        exp = dp - 1
        if exp < -4 or exp >= eprec:
            prec = min(prec, nd)
            prec -= 1
            fmt = "e" if fmt == "g" else "E"
        else:
            if prec > dp:
                prec = nd
            prec = max(prec - dp, 0)
            fmt = "f"
    out = ["-"] if neg else []
    if fmt in "eE":
        out.append(s[0] if nd else "0")
        if prec > 0:
            frac = s[1 : min(nd, prec + 1)]
            out.append("." + frac + "0" * (prec - len(frac)))
        exp = 0 if nd == 0 else dp - 1
        out.append(fmt + ("-" if exp < 0 else "+") + str(abs(exp)).rjust(2, "0"))
        return "".join(out)
    # %f
    if dp > 0:
        m = min(nd, dp)
        out.append(s[:m] + "0" * (dp - m))
    else:
        out.append("0")
    if prec > 0:
        lz = min(prec, max(0, -dp))
        off = dp + lz
        m = min(prec - lz, max(0, nd - off))
        tz = max(0, prec - lz - m)
        out.append("." + "0" * lz + s[off : off + m] + "0" * tz)
    return "".join(out)


def _fmt_b(neg: bool, a: float) -> str:
    if a == 0:
        mant, exp = 0, -1074
    elif a < 2.0**-1022:
        mant, exp = int(a * 2.0**1074), -1074
    else:
        m, e = math.frexp(a)
        mant, exp = int(m * 2**53), e - 53
    return ("-" if neg else "") + f"{mant}p{'-' if exp < 0 else '+'}{abs(exp)}"


def _fmt_x(neg: bool, a: float, prec: int, fmt: str) -> str:
    mask = (1 << 64) - 1
    if a == 0:
        mant, exp = 0, 0
    else:
        m, e = math.frexp(a)
        mant = int(m * 2**53) << (60 - 52)
        exp = e - 1
    if 0 <= prec < 15:
        shift = prec * 4
        extra = (mant << shift) & ((1 << 60) - 1)
        mant >>= 60 - shift
        if extra | (mant & 1) > 1 << 59:
            mant += 1
        mant <<= 60 - shift
        if mant & (1 << 61):
            mant >>= 1
            exp += 1
    hexd = "0123456789abcdef" if fmt == "x" else "0123456789ABCDEF"
    out = ["-"] if neg else []
    out.append("0" + fmt + str((mant >> 60) & 1))
    mant = (mant << 4) & mask
    if prec < 0 and mant != 0:
        out.append(".")
        while mant != 0:
            out.append(hexd[(mant >> 60) & 15])
            mant = (mant << 4) & mask
    elif prec > 0:
        out.append(".")
        for _ in range(prec):
            out.append(hexd[(mant >> 60) & 15])
            mant = (mant << 4) & mask
    out.append("p" if fmt == "x" else "P")
    out.append("-" if exp < 0 else "+")
    out.append(str(abs(exp)).rjust(2, "0"))
    return "".join(out)


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
