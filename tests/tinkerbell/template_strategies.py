"""Hypothesis strategies for Go templates and the JSON data they render, built from the template grammar.

Templates nest text, comments, actions with pipelines (fields, variables, literals, builtins, Tinkerbell's
functions, parenthesised pipelines), ``if``/``else if``/``with``/``else with``/``range`` with ``else``,
``break`` and ``continue``, variable declarations and assignments, trim markers and ``define``/``template``/
``block``. Field names come from a small set so that most fields exist in the generated data; the rest
exercise Go's errors. Integers stay inside int64, as Go decodes them.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NAMES = ("a", "b", "c", "s", "n", "l", "m")
TEXT_ALPHABET = "ab \n\t-xé%<\"'"
STRING_ALPHABET = "abcxyz /:.-%<>&\"'\\é✓\n0123"
INT64 = (-(2**63), 2**63 - 1)

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.integers(*INT64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 0.1, 1.5, 3.0, 1e21, 1e-7, 100000.0, 1234567.0]),
    st.text(STRING_ALPHABET, max_size=8),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=4),
    ),
    max_leaves=12,
)
# every name is present at the top level (so fields mostly resolve), with a type that suits its name
template_data = st.fixed_dictionaries(
    {
        "a": json_values,
        "b": json_values,
        "c": json_values,
        "s": st.text(STRING_ALPHABET, max_size=8),
        "n": st.integers(-3, 12),
        "l": st.lists(json_values, max_size=5),
        "m": st.dictionaries(st.sampled_from(NAMES), json_values, max_size=5),
    }
)

FORMATS = (
    "%v",
    "%d",
    "%s",
    "%q",
    "%x",
    "%X",
    "%t",
    "%T",
    "%e",
    "%f",
    "%g",
    "%5.2f",
    "%-4v|",
    "%+d",
    "%08.3f",
    "%#v",
    "%+q",
    "%#x",
    "% x",
    "%c",
    "%U",
    "%o",
    "%b",
    "%6.3v",
    "%.2s",
    "%[1]v",
    "%*d",
    "%%",
    "%",
    "%!",
    "%d %d",
    "%v|%v",
    "%[2]v %[1]v",
    "%.1e",
    "%G",
    "%10q",
    "%-8s|",
    "%05d",
    "%+.3g",
    "%#g",
    "%z",
)
# (name, minimum args, maximum args) of each function; some calls use the wrong number on purpose
FUNCTIONS = (
    ("and", 1, 3),
    ("or", 1, 3),
    ("not", 1, 1),
    ("len", 1, 1),
    ("index", 1, 3),
    ("slice", 1, 3),
    ("print", 0, 3),
    ("println", 0, 2),
    ("printf", 1, 3),
    ("eq", 1, 3),
    ("ne", 2, 2),
    ("lt", 2, 2),
    ("le", 2, 2),
    ("gt", 2, 2),
    ("ge", 2, 2),
    ("html", 1, 2),
    ("js", 1, 2),
    ("urlquery", 1, 2),
    ("call", 1, 2),
    ("contains", 2, 2),
    ("hasPrefix", 2, 2),
    ("hasSuffix", 2, 2),
    ("formatPartition", 2, 2),
)


def go_string_literal(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class _Builder:
    """Draws one template; ``scopes`` tracks declared variables the way Go's parser scopes them."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.scopes: list[list[str]] = [["$"]]
        self.counter = 0
        self.defined: list[str] = []

    def variables(self) -> list[str]:
        return [v for scope in self.scopes for v in scope]

    def new_variable(self) -> str:
        self.counter += 1
        return f"$v{self.counter}"

    # -- operands ---------------------------------------------------------------------------------
    def field_chain(self) -> str:
        names = [self.draw(st.sampled_from(NAMES))]
        while len(names) < 3 and self.draw(st.integers(0, 3)) == 0:
            names.append(self.draw(st.sampled_from(NAMES)))
        return "".join("." + n for n in names)

    def literal(self) -> str:
        return self.draw(
            st.one_of(
                st.integers(-3, 12).map(str),
                st.integers(*INT64).map(str),
                st.sampled_from(["1.5", "0.0", "-2.25", "1e3", "0x1F", "'a'", "true", "false", "nil", "2i"]),
                st.text(STRING_ALPHABET, max_size=6).map(go_string_literal),
                st.sampled_from(FORMATS).map(go_string_literal),
            )
        )

    def operand(self, depth: int) -> str:
        choices = ["field", "dot", "literal", "literal", "variable"]
        if depth > 0:
            choices += ["paren", "call", "chain"]
        kind = self.draw(st.sampled_from(choices))
        if kind == "field":
            return self.field_chain()
        if kind == "dot":
            return "."
        if kind == "variable":
            undefined = self.draw(st.integers(0, 30)) == 0
            var = "$undefined" if undefined else self.draw(st.sampled_from(self.variables()))
            if self.draw(st.booleans()):
                return var + self.field_chain()
            return var
        if kind == "paren":
            return "(" + self.pipeline(depth - 1) + ")"
        if kind == "chain":
            return "(" + self.pipeline(depth - 1) + ")" + self.field_chain()
        if kind == "call":
            return "(" + self.function_call(depth - 1) + ")"
        return self.literal()

    def function_call(self, depth: int, piped: bool = False) -> str:
        name, low, high = self.draw(st.sampled_from(FUNCTIONS))
        if self.draw(st.integers(0, 9)) == 0:
            low, high = 0, high + 1  # a wrong count now and then
        count = self.draw(st.integers(low, high))
        if piped:
            count = max(count - 1, 0)
        args = [self.operand(depth) for _ in range(count)]
        if name == "printf" and args and self.draw(st.booleans()):
            args[0] = go_string_literal(self.draw(st.sampled_from(FORMATS)))
        return " ".join([name, *args])

    def command(self, depth: int) -> str:
        if self.draw(st.booleans()):
            return self.function_call(depth)
        return self.operand(depth)

    def pipeline(self, depth: int) -> str:
        text = self.command(depth)
        for _ in range(self.draw(st.integers(0, 2))):
            text += " | " + self.function_call(depth, piped=True)
        return text

    # -- nodes ------------------------------------------------------------------------------------
    def action(self, depth: int) -> str:
        left = self.draw(st.sampled_from(["{{", "{{", "{{- "]))
        right = self.draw(st.sampled_from(["}}", "}}", " -}}"]))
        kind = self.draw(st.sampled_from(["plain", "plain", "plain", "declare", "assign"]))
        body = self.pipeline(depth)
        if kind == "declare":
            var = self.new_variable()
            body = f"{var} := {body}"
            self.scopes[-1].append(var)
        elif kind == "assign" and len(self.variables()) > 1:
            var = self.draw(st.sampled_from(self.variables()[1:]))
            body = f"{var} = {body}"
        return left + body + right

    def branch(self, depth: int, in_range: bool) -> str:
        keyword = self.draw(st.sampled_from(["if", "with", "range"]))
        self.scopes.append([])
        head = self.pipeline(1)
        if keyword == "range" and self.draw(st.integers(0, 4)) == 0:
            # assignment to variables already declared (Go sets index and element in place)
            names = self.draw(st.lists(st.sampled_from(self.variables()), min_size=1, max_size=2))
            head = ", ".join(names) + " = " + head
        elif keyword == "range" and self.draw(st.booleans()):
            index, elem = self.new_variable(), self.new_variable()
            if self.draw(st.booleans()):
                head = f"{index}, {elem} := {head}"
                self.scopes[-1] += [index, elem]
            else:
                head = f"{elem} := {head}"
                self.scopes[-1].append(elem)
        elif keyword != "range" and self.draw(st.integers(0, 3)) == 0:
            var = self.new_variable()
            head = f"{var} := {head}"
            self.scopes[-1].append(var)
        body = self.nodes(depth - 1, in_range or keyword == "range")
        text = "{{" + keyword + " " + head + "}}" + body
        if keyword != "range" and self.draw(st.integers(0, 3)) == 0:
            text += "{{else " + keyword + " " + self.pipeline(1) + "}}" + self.nodes(depth - 1, in_range)
        if self.draw(st.booleans()):
            text += "{{else}}" + self.nodes(depth - 1, in_range)
        self.scopes.pop()
        return text + "{{end}}"

    def node(self, depth: int, in_range: bool) -> str:
        choices = ["text", "action", "action", "comment"]
        if depth > 0:
            choices += ["branch", "branch"]
        if in_range:
            choices += ["break", "continue"]
        if self.defined:
            choices.append("template")
        kind = self.draw(st.sampled_from(choices))
        if kind == "text":
            return self.draw(st.text(TEXT_ALPHABET, max_size=5))
        if kind == "comment":
            return self.draw(st.sampled_from(["{{/* c */}}", "{{- /* c */ -}}", "{{/*\n*/}}"]))
        if kind == "branch":
            return self.branch(depth, in_range)
        if kind in ("break", "continue"):
            return "{{" + kind + "}}"
        if kind == "template":
            name = self.draw(st.sampled_from([*self.defined, "undefined"]))
            pipe = " " + self.pipeline(1) if self.draw(st.booleans()) else ""
            return "{{template " + go_string_literal(name) + pipe + "}}"
        return self.action(depth)

    def nodes(self, depth: int, in_range: bool) -> str:
        count = self.draw(st.integers(0, 3))
        return "".join(self.node(depth, in_range) for _ in range(count))

    def template(self) -> str:
        definitions = ""
        for i in range(self.draw(st.integers(0, 2))):
            name = f"t{i}"
            saved, self.scopes = self.scopes, [["$"]]
            body = self.nodes(1, False)
            self.scopes = saved
            definitions += "{{define " + go_string_literal(name) + "}}" + body + "{{end}}"
            self.defined.append(name)
        main = self.nodes(3, False)
        if self.draw(st.integers(0, 5)) == 0:
            saved, self.scopes = self.scopes, [["$"]]
            block_body = self.nodes(1, False)
            self.scopes = saved
            main += '{{block "blk" ' + self.pipeline(1) + "}}" + block_body + "{{end}}"
        return definitions + main


@st.composite
def templates(draw: st.DrawFn) -> str:
    """A template text drawn from the grammar."""
    return _Builder(draw).template()


@st.composite
def template_cases(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    return draw(templates()), draw(template_data)


SOUP_PIECES = (
    "{{",
    "}}",
    "{{- ",
    " -}}",
    "{{/*",
    "*/}}",
    "(",
    ")",
    "|",
    "$x",
    "$",
    ".a",
    ".b",
    ".",
    ":=",
    "=",
    ",",
    '"s"',
    "`r`",
    "'c'",
    "1",
    "-1",
    "1.5",
    "0x1",
    "1i",
    "if",
    "else",
    "end",
    "range",
    "with",
    "define",
    "template",
    "block",
    "break",
    "continue",
    "nil",
    "true",
    "index",
    "len",
    "printf",
    '"%d"',
    " ",
    "\n",
    "é",
    "x",
    "nope",
    "and",
    "or",
)
# Fragments of template syntax in any order: mostly malformed, to compare the lexer's and parser's errors
token_soup = st.lists(
    st.one_of(st.sampled_from(SOUP_PIECES), st.text("{}()|$.:=-\"`'/*ab1 \n,é\\", max_size=3)),
    max_size=14,
).map("".join)
SOUP_DATA: dict[str, Any] = {"a": {"b": [1, "x", None]}, "s": "str", "n": 2, "x": 1.5}
