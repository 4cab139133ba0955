"""Durations as users type them: ``90s``, ``15m``, ``1h30m``, or plain seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if not text or _PART.sub("", text):
        raise ValueError(f"not a duration: {text!r} (examples: 90s, 15m, 1h30m)")
    return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
