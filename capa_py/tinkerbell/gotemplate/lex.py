"""Tokens of Go's ``text/template`` language.

The lexer splits a template into text and the items inside ``{{ }}`` actions, applying the ``{{-``/``-}}``
trim markers and dropping comments, the way Go's ``text/template/parse`` lexer does. A lexing error
becomes an ``ERROR`` item at the place it happened, so the parser reports it only when it reaches it (Go
reports an earlier parse error first). Positions are character offsets into the template text; errors
convert them to Go's byte offsets.

The items are :mod:`~capa_py.tinkerbell.gotemplate.tokens`; Go's character classes and quoting are
:mod:`~capa_py.tinkerbell.gotemplate.runes`.
"""

from __future__ import annotations

from capa_py.tinkerbell.gotemplate.runes import (
    go_quote,
    go_rune_desc,
    is_alphanumeric,
    is_print,
    is_space,
)
from capa_py.tinkerbell.gotemplate.tokens import KEYWORDS, Item, T

__all__ = [
    "KEYWORDS",
    "LEFT_COMMENT",
    "LEFT_DELIM",
    "RIGHT_COMMENT",
    "RIGHT_DELIM",
    "SPACE_CHARS",
    "Item",
    "T",
    "go_quote",
    "go_rune_desc",
    "is_alphanumeric",
    "is_print",
    "is_space",
    "lex",
]

LEFT_DELIM = "{{"
RIGHT_DELIM = "}}"
LEFT_COMMENT = "/*"
RIGHT_COMMENT = "*/"
SPACE_CHARS = " \t\r\n"


def _has_left_trim_marker(text: str, pos: int) -> bool:
    return len(text) >= pos + 2 and text[pos] == "-" and is_space(text[pos + 1])


def _has_right_trim_marker(text: str, pos: int) -> bool:
    return len(text) >= pos + 2 and is_space(text[pos]) and text[pos + 1] == "-"


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.start = 0
        self.items: list[Item] = []
        self.paren_depth = 0

    # -- helpers ----------------------------------------------------------------------------------
    def line_at(self, pos: int) -> int:
        return 1 + self.text.count("\n", 0, pos)

    def emit(self, typ: T) -> None:
        self.items.append(Item(typ, self.text[self.start : self.pos], self.start, self.line_at(self.start)))
        self.start = self.pos

    def error(self, message: str) -> None:
        self.items.append(Item(T.ERROR, message, self.start, self.line_at(self.start)))

    def next(self) -> str:
        if self.pos >= len(self.text):
            self.pos += 1  # so that backup() is symmetric at the end
            return ""
        ch = self.text[self.pos]
        self.pos += 1
        return ch

    def backup(self) -> None:
        self.pos -= 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def accept(self, valid: str) -> bool:
        ch = self.next()
        if ch and ch in valid:
            return True
        self.backup()
        return False

    def accept_run(self, valid: str) -> None:
        while True:
            ch = self.next()
            if not ch or ch not in valid:
                break
        self.backup()

    def at_right_delim(self) -> tuple[bool, bool]:
        if _has_right_trim_marker(self.text, self.pos) and self.text.startswith(RIGHT_DELIM, self.pos + 2):
            return True, True
        if self.text.startswith(RIGHT_DELIM, self.pos):
            return True, False
        return False, False

    def at_terminator(self) -> bool:
        ch = self.peek()
        if ch == "" or is_space(ch) or ch in ".,|:()":
            return True
        return self.text.startswith(RIGHT_DELIM, self.pos)

    # -- states (each returns False once lexing stops) ---------------------------------------------
    def run(self) -> list[Item]:
        while self.lex_text():
            if not self.lex_left_delim():
                break
        return self.items

    def lex_text(self) -> bool:
        x = self.text.find(LEFT_DELIM, self.pos)
        if x < 0:
            self.pos = len(self.text)
            if self.pos > self.start:
                self.emit(T.TEXT)
            self.emit(T.EOF)
            return False
        if x > self.pos:
            self.pos = x
            end = x
            if _has_left_trim_marker(self.text, x + len(LEFT_DELIM)):
                end = self.start + len(self.text[self.start : x].rstrip(SPACE_CHARS))
            value = self.text[self.start : end]
            if value:
                self.items.append(Item(T.TEXT, value, self.start, self.line_at(self.start)))
            self.start = self.pos
        return True

    def lex_left_delim(self) -> bool:
        self.pos += len(LEFT_DELIM)
        trim = _has_left_trim_marker(self.text, self.pos)
        after_marker = 2 if trim else 0
        if self.text.startswith(LEFT_COMMENT, self.pos + after_marker):
            self.pos += after_marker
            self.start = self.pos
            return self.lex_comment()
        self.items.append(Item(T.LEFT_DELIM, LEFT_DELIM, self.start, self.line_at(self.start)))
        self.pos += after_marker
        self.start = self.pos
        self.paren_depth = 0
        return self.lex_inside_action()

    def lex_comment(self) -> bool:
        self.pos += len(LEFT_COMMENT)
        x = self.text.find(RIGHT_COMMENT, self.pos)
        if x < 0:
            self.error("unclosed comment")
            return False
        self.pos = x + len(RIGHT_COMMENT)
        delim, trim = self.at_right_delim()
        if not delim:
            self.error("comment ends before closing delimiter")
            return False
        if trim:
            self.pos += 2
        self.pos += len(RIGHT_DELIM)
        if trim:
            self.pos += len(self.text) - self.pos - len(self.text[self.pos :].lstrip(SPACE_CHARS))
        self.start = self.pos
        return True

    def lex_right_delim(self) -> None:
        _, trim = self.at_right_delim()
        if trim:
            self.pos += 2
            self.start = self.pos
        self.pos += len(RIGHT_DELIM)
        self.emit(T.RIGHT_DELIM)
        if trim:
            self.pos += len(self.text) - self.pos - len(self.text[self.pos :].lstrip(SPACE_CHARS))
            self.start = self.pos

    def lex_inside_action(self) -> bool:
        while True:
            delim, _ = self.at_right_delim()
            if delim:
                if self.paren_depth == 0:
                    self.lex_right_delim()
                    return True
                self.error("unclosed left paren")
                return False
            ch = self.next()
            if ch == "":
                self.error("unclosed action")
                return False
            if is_space(ch):
                self.backup()
                if self.lex_space():
                    self.lex_right_delim()
                    return True
                continue
            ok = True
            if ch == "=":
                self.emit(T.ASSIGN)
            elif ch == ":":
                if self.next() != "=":
                    self.error("expected :=")
                    return False
                self.emit(T.DECLARE)
            elif ch == "|":
                self.emit(T.PIPE)
            elif ch == '"':
                ok = self.lex_quoted('"', T.STRING, "quoted string")
            elif ch == "`":
                ok = self.lex_raw_quote()
            elif ch == "$":
                ok = self.lex_variable()
            elif ch == "'":
                ok = self.lex_quoted("'", T.CHAR_CONSTANT, "character constant")
            elif ch == "." and self.peek() != "" and not "0" <= self.peek() <= "9":
                ok = self.lex_field_or_variable(T.FIELD)
            elif ch in "+-." or "0" <= ch <= "9":
                self.backup()
                ok = self.lex_number()
            elif is_alphanumeric(ch):
                self.backup()
                ok = self.lex_identifier()
            elif ch == "(":
                self.paren_depth += 1
                self.emit(T.LEFT_PAREN)
            elif ch == ")":
                self.paren_depth -= 1
                if self.paren_depth < 0:
                    self.error("unexpected right paren")
                    return False
                self.emit(T.RIGHT_PAREN)
            elif ord(ch) < 0x80 and is_print(ch):
                self.emit(T.CHAR)
            else:
                self.error(f"unrecognized character in action: {go_rune_desc(ch)}")
                return False
            if not ok:
                return False

    def lex_space(self) -> bool:
        """Scan spaces; True when they end in `` -}}`` with a single space, i.e. at the delimiter."""
        num = 0
        while is_space(self.peek()):
            self.next()
            num += 1
        at_trim = _has_right_trim_marker(self.text, self.pos - 1)
        if at_trim and self.text.startswith(RIGHT_DELIM, self.pos + 1):
            self.backup()
            if num == 1:
                return True
        self.emit(T.SPACE)
        return False

    def lex_identifier(self) -> bool:
        while True:
            ch = self.next()
            if is_alphanumeric(ch):
                continue
            self.backup()
            word = self.text[self.start : self.pos]
            if not self.at_terminator():
                self.error(f"bad character {go_rune_desc(ch)}")
                return False
            if word in KEYWORDS and KEYWORDS[word] is not T.DOT:
                self.emit(KEYWORDS[word])
            elif word in ("true", "false"):
                self.emit(T.BOOL)
            else:
                self.emit(T.IDENTIFIER)
            return True

    def lex_variable(self) -> bool:
        if self.at_terminator():
            self.emit(T.VARIABLE)
            return True
        return self.lex_field_or_variable(T.VARIABLE)

    def lex_field_or_variable(self, typ: T) -> bool:
        if self.at_terminator():
            self.emit(T.VARIABLE if typ is T.VARIABLE else T.DOT)
            return True
        while True:
            ch = self.next()
            if not is_alphanumeric(ch):
                self.backup()
                break
        if not self.at_terminator():
            self.error(f"bad character {go_rune_desc(self.peek())}")
            return False
        self.emit(typ)
        return True

    def lex_number(self) -> bool:
        if not self.scan_number():
            self.error(f"bad number syntax: {go_quote(self.text[self.start : self.pos])}")
            return False
        if self.peek() in ("+", "-") and self.peek():
            if not self.scan_number() or self.text[self.pos - 1] != "i":
                self.error(f"bad number syntax: {go_quote(self.text[self.start : self.pos])}")
                return False
            self.emit(T.COMPLEX)
            return True
        self.emit(T.NUMBER)
        return True

    def scan_number(self) -> bool:
        self.accept("+-")
        digits = "0123456789_"
        if self.accept("0"):
            if self.accept("xX"):
                digits = "0123456789abcdefABCDEF_"
            elif self.accept("oO"):
                digits = "01234567_"
            elif self.accept("bB"):
                digits = "01_"
        self.accept_run(digits)
        if self.accept("."):
            self.accept_run(digits)
        if len(digits) == 11 and self.accept("eE"):
            self.accept("+-")
            self.accept_run("0123456789_")
        if len(digits) == 23 and self.accept("pP"):
            self.accept("+-")
            self.accept_run("0123456789_")
        self.accept("i")
        if is_alphanumeric(self.peek()):
            self.next()
            return False
        return True

    def lex_quoted(self, quote: str, token: T, what: str) -> bool:
        """A character constant or an interpreted string: up to the closing ``quote``, escapes skipped;
        a line end or the end of the text first is Go's ``unterminated <what>``."""
        while True:
            ch = self.next()
            if ch == "\\":
                ch = self.next()
                if ch not in ("", "\n"):
                    continue
            if ch in ("", "\n"):
                self.error(f"unterminated {what}")
                return False
            if ch == quote:
                break
        self.emit(token)
        return True

    def lex_raw_quote(self) -> bool:
        x = self.text.find("`", self.pos)
        if x < 0:
            self.error("unterminated raw quoted string")
            return False
        self.pos = x + 1
        self.emit(T.RAW_STRING)
        return True


def lex(text: str) -> list[Item]:
    """All items of ``text``, ending with an ``EOF`` or an ``ERROR`` item."""
    return _Lexer(text).run()
