"""The errors of templates: :class:`TemplateError` of parsing and execution, and :class:`FuncError`, a
template function's own error (which the executor reports as a :class:`TemplateError`)."""

from __future__ import annotations


class TemplateError(ValueError):
    """A template failed to parse or to execute; the message is Go's, naming the position.

    Parse errors read ``template: NAME:LINE: MESSAGE``; execution errors read
    ``template: NAME:LINE:COL: executing "TEMPLATE" at <NODE>: MESSAGE`` (Go counts the column in bytes from
    0). ``line`` and ``column`` hold the same numbers (``column`` is None for parse errors, which Go
    reports by line only).
    """

    def __init__(
        self, message: str, *, name: str, line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.line = line
        self.column = column


class FuncError(Exception):
    """A function's own error (Go's second return value)."""
