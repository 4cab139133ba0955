"""The items Go's ``text/template`` lexer produces: their types (:class:`T`, keywords after ``KEYWORD``),
the keywords, and :class:`Item`, which prints as Go prints an item in its errors."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from capa_py.tinkerbell.gotemplate.runes import go_quote


class T(Enum):
    """Item types; the keywords follow ``KEYWORD``, as in Go (their printed form is ``<word>``)."""

    ERROR = auto()
    BOOL = auto()
    CHAR = auto()
    CHAR_CONSTANT = auto()
    COMMENT = auto()
    COMPLEX = auto()
    ASSIGN = auto()
    DECLARE = auto()
    EOF = auto()
    FIELD = auto()
    IDENTIFIER = auto()
    LEFT_DELIM = auto()
    LEFT_PAREN = auto()
    NUMBER = auto()
    PIPE = auto()
    RAW_STRING = auto()
    RIGHT_DELIM = auto()
    RIGHT_PAREN = auto()
    SPACE = auto()
    STRING = auto()
    TEXT = auto()
    VARIABLE = auto()
    KEYWORD = auto()
    BLOCK = auto()
    BREAK = auto()
    CONTINUE = auto()
    DOT = auto()
    DEFINE = auto()
    ELSE = auto()
    END = auto()
    IF = auto()
    NIL = auto()
    RANGE = auto()
    TEMPLATE = auto()
    WITH = auto()


KEYWORDS: dict[str, T] = {
    ".": T.DOT,
    "block": T.BLOCK,
    "break": T.BREAK,
    "continue": T.CONTINUE,
    "define": T.DEFINE,
    "else": T.ELSE,
    "end": T.END,
    "if": T.IF,
    "range": T.RANGE,
    "nil": T.NIL,
    "template": T.TEMPLATE,
    "with": T.WITH,
}
_KEYWORD_TYPES = frozenset(KEYWORDS.values())


@dataclass(frozen=True, slots=True)
class Item:
    typ: T
    val: str
    pos: int
    line: int

    def __str__(self) -> str:
        if self.typ is T.EOF:
            return "EOF"
        if self.typ is T.ERROR:
            return self.val
        if self.typ in _KEYWORD_TYPES:
            return f"<{self.val}>"
        if len(self.val.encode("utf-8", "surrogateescape")) > 10:  # Go: longer than 10 bytes, cut at 10 runes
            return go_quote(self.val[:10]) + "..."
        return go_quote(self.val)
