"""The CtrlKit DSL's scanner: tokens on demand, raw lines for selectors, and the comments above a line
(the documentation of the node below them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple


class Tok(StrEnum):
    WORD = "word"
    PUNCT = "punctuation"
    NEWLINE = "end of line"
    EOF = "end of file"


class Token(NamedTuple):
    kind: Tok
    text: str
    line: int  # 1-based
    col: int  # 1-based

    def describe(self) -> str:
        if self.kind in (Tok.WORD, Tok.PUNCT):
            return f"'{self.text}'"
        return str(self.kind)


_PUNCTUATION = "{}(),"


class Scanner:
    """Tokens on demand: the parser decides when newlines matter and when a line is read raw."""

    def __init__(self, text: str) -> None:
        # Lines as editors count them: split on newlines only (not on form feeds and other separators).
        self.lines = text.replace("\r\n", "\n").split("\n")
        if self.lines[-1] == "":
            self.lines.pop()  # a final newline ends the last line; it does not start another
        self.row = 0  # 0-based index into lines
        self.col = 0  # 0-based index into the current line
        # Full-line comments by 1-based line number: the documentation of the node below them.
        self.comments: dict[int, str] = {}
        for number, line in enumerate(self.lines, start=1):
            stripped = line.strip()
            if stripped.startswith("//"):
                body = stripped[2:]
                self.comments[number] = (body[1:] if body.startswith(" ") else body).rstrip()

    def eof(self) -> Token:
        if not self.lines:
            return Token(Tok.EOF, "", 1, 1)
        return Token(Tok.EOF, "", len(self.lines), len(self.lines[-1]) + 1)

    def _skip_blanks(self) -> None:
        text = self.lines[self.row]
        while self.col < len(text) and text[self.col].isspace():
            self.col += 1

    def _at_line_end(self) -> bool:
        text = self.lines[self.row]
        return self.col >= len(text) or text.startswith("//", self.col)

    def peek(self, newlines: bool = False) -> Token:
        """The next token; with ``newlines`` the end of the current line is a token too."""
        while self.row < len(self.lines):
            self._skip_blanks()
            if not self._at_line_end():
                return self._word_or_punct()
            if newlines:
                return Token(Tok.NEWLINE, "", self.row + 1, self.col + 1)
            self.row += 1
            self.col = 0
        return self.eof()

    def take(self, newlines: bool = False) -> Token:
        token = self.peek(newlines)
        if token.kind is Tok.NEWLINE:
            self.row += 1
            self.col = 0
        elif token.kind is not Tok.EOF:
            self.col = token.col - 1 + len(token.text)
        return token

    def _word_or_punct(self) -> Token:
        text = self.lines[self.row]
        start = self.col
        if text[start] in _PUNCTUATION:
            return Token(Tok.PUNCT, text[start], self.row + 1, start + 1)
        end = start
        while (
            end < len(text)
            and not text[end].isspace()
            and text[end] not in _PUNCTUATION
            and not text.startswith("//", end)
        ):
            end += 1
        return Token(Tok.WORD, text[start:end], self.row + 1, start + 1)

    def raw_lines(self) -> Iterable[tuple[str, int, int]]:
        """The rest of the current line, then whole lines: ``(text, line, col)`` without blanks or comments.

        A ``//`` starts a comment at the beginning of a line or after whitespace, so values such as
        ``a//b`` survive. The caller stops iterating at the line that closes the block and seeks back to
        just after its brace.
        """
        while self.row < len(self.lines):
            text = self.lines[self.row]
            self._skip_blanks()
            start = self.col
            comment = re.search(r"(^|\s)//", text[start:])
            end = len(text) if comment is None else start + comment.start()
            content = text[start:end].rstrip()
            row = self.row
            self.row += 1
            self.col = 0
            if content:
                yield content, row + 1, start + 1

    def seek(self, line: int, col: int) -> None:
        """Continue scanning at a 1-based position (after a block read with :meth:`raw_lines`)."""
        self.row = line - 1
        self.col = col - 1

    def doc_above(self, line: int) -> str:
        """The comment lines directly above ``line``, joined, without leading or trailing blank lines."""
        collected: list[str] = []
        number = line - 1
        while number in self.comments:
            collected.append(self.comments[number])
            number -= 1
        return "\n".join(reversed(collected)).strip("\n")
