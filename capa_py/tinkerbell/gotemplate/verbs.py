"""How Go's ``fmt`` formats one operand under a verb's flags, width and precision (Go's ``fmt.fmt``):
padding, integers in any base, runes, strings (plain, quoted, hex) and floats.

:class:`Formatter` writes into a buffer; :mod:`~capa_py.tinkerbell.gotemplate.printing` chooses the verb's
formatting for each template value and reads the format string.
"""

from __future__ import annotations

from dataclasses import dataclass

from capa_py.tinkerbell.gotemplate.floatfmt import format_float
from capa_py.tinkerbell.gotemplate.runes import go_quote, is_print, quote_rune
from capa_py.tinkerbell.gotemplate.values import to_bytes

LDIGITS = "0123456789abcdefx"
UDIGITS = "0123456789ABCDEFX"
MAX_RUNE = 0x10FFFF


@dataclass
class Flags:
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


class Formatter:
    """A buffer and the flags of the verb being formatted."""

    def __init__(self) -> None:
        self.buf: list[str] = []
        self.f = Flags()

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
        self.pad("'" + quote_rune(ch, "'", self.f.plus) + "'")

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
