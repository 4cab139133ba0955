"""Go literal syntax used by templates: ``strconv.Unquote``, ``strconv.UnquoteChar`` and number parsing
(``strconv.ParseInt``/``ParseUint`` with base 0 and ``ParseFloat``), with Go's rules rather than Python's
(``010`` is octal, ``1__0`` is invalid, out-of-range values are errors)."""

from __future__ import annotations

import math
import re

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}


class SyntaxErr(ValueError):
    """``strconv.ErrSyntax``: Go prints it as ``invalid syntax``."""

    def __init__(self) -> None:
        super().__init__("invalid syntax")


def unquote_char(s: str, quote: str) -> tuple[str, str]:
    """One (possibly escaped) character at the start of ``s`` and the rest; ``SyntaxErr`` when invalid."""
    if not s:
        raise SyntaxErr
    ch = s[0]
    if ch == quote and quote in "'\"":
        raise SyntaxErr
    if ch != "\\":
        return ch, s[1:]
    if len(s) <= 1:
        raise SyntaxErr
    c = s[1]
    rest = s[2:]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], rest
    if c in "xuU":
        n = {"x": 2, "u": 4, "U": 8}[c]
        digits = rest[:n]
        if len(digits) < n or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise SyntaxErr
        value = int(digits, 16)
        rest = rest[n:]
        if c == "x":
            # a single byte: one UTF-8 byte cannot stand alone in a str unless it is ASCII
            return (chr(value) if value < 0x80 else chr(0xDC00 + value)), rest
        if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            raise SyntaxErr
        return chr(value), rest
    if c in "01234567":
        digits = s[1:4]
        if len(digits) < 3 or not all(d in "01234567" for d in digits):
            raise SyntaxErr
        value = int(digits, 8)
        if value > 255:
            raise SyntaxErr
        return (chr(value) if value < 0x80 else chr(0xDC00 + value)), s[4:]
    if c in "'\"":
        if c != quote:
            raise SyntaxErr
        return c, rest
    raise SyntaxErr


def unquote(s: str) -> str:
    """``strconv.Unquote`` for double-quoted and back-quoted strings."""
    if len(s) < 2 or s[0] != s[-1]:
        raise SyntaxErr
    quote = s[0]
    body = s[1:-1]
    if quote == "`":
        if "`" in body:
            raise SyntaxErr
        return body.replace("\r", "")
    if quote != '"' or "\n" in body:
        raise SyntaxErr
    out: list[str] = []
    while body:
        ch, body = unquote_char(body, quote)
        out.append(ch)
    return _join_bytes("".join(out))


def _join_bytes(s: str) -> str:
    """Turn runs of escaped bytes (``\\xe2\\x82\\xac``) back into the characters they encode in UTF-8."""
    if not any(0xDC80 <= ord(c) <= 0xDCFF for c in s):
        return s
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")


_INT_RE = re.compile(
    r"[+-]?(?:0[xX](?:_?[0-9a-fA-F])+|0[bB](?:_?[01])+|0[oO](?:_?[0-7])+|0(?:_?[0-7])*|[1-9](?:_?[0-9])*)"
)
_DEC_FLOAT_RE = re.compile(
    r"[+-]?(?:[0-9](?:_?[0-9])*\.?(?:[0-9](?:_?[0-9])*)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9](?:_?[0-9])*)?"
)
_HEX_FLOAT_RE = re.compile(
    r"[+-]?0[xX](?:_?[0-9a-fA-F])*\.?(?:[0-9a-fA-F](?:_?[0-9a-fA-F])*)?[pP][+-]?[0-9](?:_?[0-9])*"
)


def parse_int_base0(text: str) -> int | None:
    """The integer Go's ``ParseInt(text, 0, ...)`` syntax gives (without range checks), or None."""
    if not _INT_RE.fullmatch(text):
        return None
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-").replace("_", "")
    if len(body) > 1 and body[0] == "0" and body[1] in "0123456789":
        return sign * int(body[1:], 8)
    if len(body) > 1 and body[0] == "0" and body[1] in "oO":
        return sign * int(body[2:], 8)
    return sign * int(body, 0)


def parse_float(text: str) -> float | None:
    """Go's ``ParseFloat(text, 64)`` (decimal and hexadecimal forms), or None when it errors."""
    if _DEC_FLOAT_RE.fullmatch(text) and any(c.isdigit() for c in text):
        value = float(text.replace("_", ""))
    elif _HEX_FLOAT_RE.fullmatch(text):
        body = text.replace("_", "")
        value = float.fromhex(body)
    else:
        return None
    if math.isinf(value):
        return None
    return value
