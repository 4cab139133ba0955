"""Go's view of characters, as the template lexer, parser and printer need it: ``unicode.IsPrint`` and the
lexer's classes, ``strconv.Quote`` (and ``QuoteToASCII``) and ``%#U``.

Bytes that are not UTF-8 are kept in strings as surrogate escapes and quoted as Go quotes them.
"""

from __future__ import annotations

import unicodedata


def go_quote(s: str, ascii_only: bool = False) -> str:
    """``strconv.Quote``: a double-quoted Go string literal (``strconv.QuoteToASCII`` with ascii_only)."""
    out = ['"']
    for ch in s:
        out.append(quote_rune(ch, '"', ascii_only))
    out.append('"')
    return "".join(out)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def quote_rune(ch: str, quote: str, ascii_only: bool) -> str:
    if ch in (quote, "\\"):
        return "\\" + ch
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF:  # a byte that is not UTF-8 (kept as a surrogate escape)
        return "\\ufffd" if code < 0xDC80 else f"\\x{code - 0xDC00:02x}"
    if ascii_only:
        if code < 0x80 and is_print(ch):
            return ch
    elif is_print(ch):
        return ch
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def is_print(ch: str) -> bool:
    """Go's ``unicode.IsPrint``: letters, marks, numbers, punctuation, symbols and the ASCII space."""
    if ch == " ":
        return True
    return unicodedata.category(ch)[0] in "LMNPS"


def is_space(ch: str) -> bool:
    return ch in (" ", "\t", "\r", "\n")


def is_alphanumeric(ch: str) -> bool:
    if ch == "_":
        return True
    if not ch:
        return False
    cat = unicodedata.category(ch)
    return cat[0] == "L" or cat == "Nd"


def go_rune_desc(ch: str) -> str:
    """Go's ``%#U`` of a rune: ``U+0041 'A'`` (the quoted form only when printable)."""
    if ch == "":
        return "U+FFFFFFFFFFFFFFFF"  # Go's eof rune is -1
    code = ord(ch)
    if is_print(ch):
        return f"U+{code:04X} '{ch}'"
    return f"U+{code:04X}"
