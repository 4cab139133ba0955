"""Tinkerbell: rendering workflow templates the way Tinkerbell's Go controller does.

``render_text(text, data)`` renders one template string with Go's ``text/template`` semantics
(``missingkey=error``) and Tinkerbell's template functions; ``TemplateError`` carries Go's message, which
names the template position (``template: action:1:5: executing "action" at <.missing>: map has no entry
for key "missing"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capa_py.tinkerbell.gotemplate import FUNCS, TemplateError, execute, parse

__all__ = ["TemplateError", "render_text"]


def render_text(text: str, data: Mapping[str, Any], *, name: str = "action") -> str:
    """Render ``text`` over JSON-like ``data`` exactly as Go's ``text/template`` would.

    ``name`` is the template's name in error messages. Raises TemplateError for parse and execution
    errors, and TypeError when ``data`` holds something JSON cannot.
    """
    return execute(parse(name, text, FUNCS), name, data)
