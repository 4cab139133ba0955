"""Go's ``strconv.FormatFloat`` for 64-bit floats: the formats ``e``, ``E``, ``f``, ``g``, ``G``, ``b``, ``x``
and ``X``, with a precision or (``-1``) the shortest digits that round-trip.

Python's ``Decimal`` of a float is exact, so rounding to a precision agrees with Go's.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal, localcontext


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
