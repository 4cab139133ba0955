"""Helpers that write the generated module's source lint-clean: literals, calls and docstrings that fit the
line length, selectors, and imports sorted and sectioned as ruff's isort files them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import PurePath

from capa_py.ctrlkit.state import Selector

LINE_LENGTH = 110
INDENT = "    "


def string_literal(text: str) -> str:
    """A double-quoted Python string literal (JSON escapes are valid Python escapes)."""
    return json.dumps(text, ensure_ascii=False)


def fit_line(line: str) -> str:
    """Keep a line the generator cannot break (a long literal) lint-clean.

    Like ruff's E501, this lets through a line of a single word and one ending with a URL that starts
    within the limit, so that the ``noqa`` is never unused.
    """
    chunks = line.split()
    if len(line) <= LINE_LENGTH or len(chunks) < 2:
        return line
    if "://" in chunks[-1] and line.rindex(chunks[-1]) < LINE_LENGTH:
        return line
    return f"{line}  # noqa: E501"


def call_lines(indent: str, head: str, args: Sequence[str], tail: str) -> list[str]:
    """``head(args)tail`` on one line when it fits, otherwise one argument per line."""
    one_line = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one_line) <= LINE_LENGTH or not args:
        return [fit_line(one_line)]
    inner = indent + INDENT
    return [f"{indent}{head}(", *(fit_line(f"{inner}{arg},") for arg in args), f"{indent}){tail}"]


def docstring_lines(text: str, indent: str) -> list[str]:
    """A docstring of ``text``, lines wrapped to the line length, quotes and backslashes escaped."""
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    # A quote next to the docstring's own quotes would end (or blur) them.
    if text.startswith('"'):
        text = "\\" + text
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    width = LINE_LENGTH - len(indent)
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if len(line) + 3 <= width:
            lines.append(line)
        else:
            lead = line[: len(line) - len(line.lstrip())]
            lines.extend(
                textwrap.wrap(
                    line,
                    width - 3,
                    initial_indent=lead,
                    subsequent_indent=lead,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
    if not lines:
        return []
    if len(lines) == 1 and len(lines[0]) + 6 <= width:
        return [f'{indent}"""{lines[0]}"""']
    body = [f"{indent}{line}" if line else "" for line in lines[1:]]
    return [fit_line(f'{indent}"""{lines[0]}'), *(fit_line(line) for line in body), f'{indent}"""']


def selector_args(selector: Selector) -> list[str]:
    if selector.kind == "owned":
        return ['"owned"']
    return [string_literal(selector.kind), string_literal(selector.key), string_literal(selector.value)]


def selector_source(selector: Selector) -> str:
    return f"Selector({', '.join(selector_args(selector))})"


def _is_third_party(module: str) -> bool:
    """Whether ruff's isort would file ``module`` under third-party: installed into site-packages."""
    try:
        spec = find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return True
    locations = [spec.origin or ""] if spec is not None else []
    if spec is not None and spec.submodule_search_locations:
        locations.extend(spec.submodule_search_locations)
    parts = {part for location in locations for part in PurePath(location).parts}
    return bool(parts & {"site-packages", "dist-packages"})


def _member_key(name: str) -> tuple[int, str, str]:
    # isort's order-by-type: CONSTANTS, then Classes, then everything else.
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


def import_lines(imports: dict[str, set[str]]) -> list[str]:
    sections: dict[bool, list[str]] = {True: [], False: []}
    for module in sorted(imports, key=lambda m: (m.lower(), m)):
        names = sorted(imports[module], key=_member_key)
        line = f"from {module} import {', '.join(names)}"
        if len(line) > LINE_LENGTH:
            line = "\n".join([f"from {module} import (", *(f"{INDENT}{n}," for n in names), ")"])
        sections[_is_third_party(module)].append(line)
    blocks = [block for block in (sections[True], sections[False]) if block]
    return "\n\n".join("\n".join(block) for block in blocks).splitlines()


STDLIB_IMPORTS = """\
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast"""
