"""Views of a text in which secrets hide from the rules: without its invisible characters, with its ``%XX``
escapes decoded, with its backslash escapes decoded. Each view says where its characters come from in the
text, so that what is found in it is redacted in the text (``mapped``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from mdmem.util.lazyre import lazy

Span = tuple[int, int, str]
"""``(start, end, kind)`` of a secret in the text it was found in."""

# -- invisible characters -----------------------------------------------------------------------------------
_IGNORABLE = lazy(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0]"
)
"""Unicode's default-ignorable characters (zero-width space and joiners, soft hyphen, word joiner, bidi controls,
variation selectors...): invisible, so a key split by one looks whole to a reader and to a model."""


def without_ignorables(text: str) -> tuple[str, list[int]] | None:
    """``text`` with default-ignorable characters removed and the offset in ``text`` of each character kept;
    None when there are none (the common case, checked by one search)."""
    if text.isascii() or _IGNORABLE.search(text) is None:
        return None
    keep = [i for i, c in enumerate(text) if _IGNORABLE.fullmatch(c) is None]
    return "".join(text[i] for i in keep), keep


def mapped(spans: list[Span], offsets: list[int]) -> list[Span]:
    """Spans of a view back in the text it was made from (a span covers what was removed inside it)."""
    return [(offsets[s], offsets[e - 1] + 1, kind) for s, e, kind in spans]


_PERCENT = lazy(r"%[0-9A-Fa-f]{2}")


def percent_decoded(text: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` with each ``%XX`` escape decoded to its character (``key%3Dsk-proj-...``, ``%22ghp_...%22``, a
    header URL-encoded as a whole), and where each character of that view starts and ends in ``text``; None
    without escapes.
    Each escape decodes to one character (a byte), so an escaped non-ASCII letter does not line up, and
    that is no matter: the secrets looked for are ASCII."""
    if "%" not in text or _PERCENT.search(text) is None:
        return None
    return _decoded(text, _PERCENT.finditer(text), lambda escape: chr(int(escape[1:], 16)))


_ESCAPE = lazy(r"\\(?:[\"'/\\bfnrt]|u[0-9A-Fa-f]{4})")
_ESCAPED = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def backslash_decoded(text: str) -> tuple[str, list[int], list[int]] | None:
    """``text`` with JSON's (and most languages') backslash escapes decoded, ``\\"``, ``\\n``, ``\\u002d``...:
    a JSON document quoted inside another (tool arguments in an SSE event, a logged request body) hides its
    ``"api_key": "..."`` behind ``\\"``; and where each character of that view starts and ends in ``text``;
    None without escapes."""
    if "\\" not in text or _ESCAPE.search(text) is None:
        return None
    return _decoded(text, _ESCAPE.finditer(text), _unescape)


def _unescape(escape: str) -> str:
    code = escape[1:]
    return chr(int(code[1:], 16)) if code[0] == "u" else _ESCAPED.get(code, code)


def _decoded(
    text: str, escapes: Iterable[re.Match[str]], decode: Callable[[str], str]
) -> tuple[str, list[int], list[int]]:
    """``text`` with each of ``escapes`` replaced by ``decode`` of it (one character), and where each character
    of the result starts and ends in ``text``."""
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in escapes:
        pieces.append(text[pos : m.start()])
        starts.extend(range(pos, m.start()))
        ends.extend(range(pos + 1, m.start() + 1))
        pieces.append(decode(m[0]))
        starts.append(m.start())
        ends.append(m.end())
        pos = m.end()
    pieces.append(text[pos:])
    starts.extend(range(pos, len(text)))
    ends.extend(range(pos + 1, len(text) + 1))
    return "".join(pieces), starts, ends
