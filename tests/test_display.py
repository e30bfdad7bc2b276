"""Terminal-safe display of names and text (mdmem.util.display)."""

from __future__ import annotations

import pytest

from mdmem.util.display import display_name, display_text


@pytest.mark.parametrize(
    ("raw", "name", "text"),
    [
        ("MEMORY.md", "MEMORY.md", "MEMORY.md"),
        ("日本語 é.md", "日本語 é.md", "日本語 é.md"),
        ("a\x1b[31mb", "a\\x1b[31mb", "a\\x1b[31mb"),
        ("a\nb\tc", "a\\x0ab\\x09c", "a\nb\tc"),
        ("a\r\nb", "a\\x0d\\x0ab", "a\r\nb"),
        ("a\rb", "a\\x0db", "a\\x0db"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b", "\\x00\\x7f\\x9b"),
        ("a\u202eb\u2066c", "a\\u202eb\\u2066c", "a\\u202eb\\u2066c"),
        ("bad\udcffname", "bad\\udcffname", "bad\\udcffname"),
    ],
)
def test_control_characters_are_escaped(raw: str, name: str, text: str) -> None:
    assert display_name(raw) == name
    assert display_text(raw) == text
    display_text(raw).encode("utf-8")  # always printable on a UTF-8 terminal
