"""Text safe to show on a terminal.

A file name or a note can hold control characters: ANSI escape sequences that recolour, move the cursor,
retitle the window or hide text, a carriage return that overwrites the line, bidirectional overrides that
reorder what is shown. Text output escapes them (``\\x1b``, ``\\u202e``) so what a user sees is what is on
disk. JSON output does not use this: it keeps exact strings (JSON escapes control characters itself).
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, bidirectional marks/overrides/isolates, and lone surrogates (undecodable
# bytes in a file name), which a terminal cannot even encode.
_OTHER = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_NAME = re.compile(f"[\x00-\x1f{_OTHER}]")
_TEXT = re.compile(f"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f{_OTHER}]")  # keeps \t, \n and \r\n


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def display_name(name: str) -> str:
    """``name`` (a path) with every control character escaped, newlines and tabs included."""
    return _NAME.sub(_escape, name)


def display_text(text: str) -> str:
    """Multi-line ``text`` with control characters escaped; newlines, tabs and CRLF line ends are kept."""
    return _TEXT.sub(_escape, text)
