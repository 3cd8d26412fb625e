"""Escaping file names and manifest text before they reach a terminal or a log.

A file name may hold any byte but ``/`` and NUL, so a hostile (or merely broken) manifest can
list names carrying escape sequences that move the cursor, recolour or clear the screen, or
bidirectional-override characters that reorder what is shown. Every extsrc message that embeds
a path, a manifest file name or manifest text passes it through :func:`shown`, which leaves
printable text alone and writes every other character as a Python escape (``\\x1b``,
``\\u202e``, ``\\udcff`` for an undecodable byte).
"""

from __future__ import annotations

__all__ = ["shown"]


def _escape(c: str) -> str:
    code = ord(c)
    if c == "\t":
        return "\\t"
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: object) -> str:
    """``str(text)`` with every non-printable character (controls, format and bidi characters,
    separators other than the plain space, lone surrogates) written as an escape, so the result
    cannot act on a terminal. Printable text, including non-ASCII letters, is unchanged."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case, in C
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)
