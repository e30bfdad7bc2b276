"""The supersession convention: which lines of a memory file say a fact is no longer current. Pure: text in,
edges out.

A fact is never deleted, only superseded. A person or an agent marks it in plain Markdown, in any of these
ways (case does not matter; the arrow may be ``→``, ``->`` or ``by``; the date is optional):

- the old line ends with ``(superseded 2026-10-02 → memory/2026-10-02.md#L4)``: that line is superseded by
  line 4 of ``memory/2026-10-02.md``. ``(superseded)`` alone says only that it is no longer current;
- the new line ends with ``(supersedes memory/2026-03-01.md#L5)``: it supersedes that line
  (``mdmem remember --supersedes`` writes both markers);
- the whole fact is struck through, ``- [09:10] ~~Priya lives in Berlin~~``: no longer current. A word struck
  through inside a line (``lives in ~~Berlin~~ Lisbon``) is an edit in place, not a superseded line.

A reference is ``path#L<n>`` (``#L4-L6`` cites lines 4 to 6 and means the first), a Markdown link to one
(``[the move](memory/2026-10-02.md#L4)``) or the same in angle brackets. A path with a folder is relative to
the workspace (as search results cite), and so is ``MEMORY.md``; any other name without a folder, or a path
starting with ``./`` or ``../``, is relative to the file that holds it. A reference that leaves the workspace,
is absolute or is a URL is ignored. Lines inside fenced code blocks are never read as markers.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from mdmem.files.fences import outside_fences
from mdmem.files.workspace import ROOT_FILES

__all__ = ["LINE_LEAD", "Supersession", "marker", "parse_ref", "parse_supersessions", "strip_markers"]

_REF = r"(?:\[[^\]\n]*\]\(\s*<?(?P<{n}a>[^)\s>]+)>?\s*\)|<(?P<{n}b>[^>\s]+)>|(?P<{n}c>[^\s()<>\[\]]+#L\d+(?:-L?\d+)?))"
_SUPERSEDED = re.compile(
    r"\(\s*(?:superseded|replaced|outdated)(?:\s+(?:on\s+)?(?P<date>\d{4}-\d{2}-\d{2}))?"
    r"(?:\s*(?:→|->|=>|\bby\b|:)\s*" + _REF.format(n="o") + r")?\s*\)",
    re.IGNORECASE,
)
_SUPERSEDES = re.compile(
    r"\(\s*(?:supersedes|replaces)(?:\s*:)?\s+" + _REF.format(n="n") + r"\s*\)",
    re.IGNORECASE,
)
# What comes before a fact on its line: a list bullet or number, a checkbox, a [YYYY-MM-DD HH:MM] or [HH:MM] stamp.
LINE_LEAD = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?(?:\[[ xX]\]\s+)?(?:\[[0-9:\-T ]{4,19}\]\s*)?")
_STRUCK = re.compile(r"^~~(?!~)(?P<fact>.+?)(?<!~)~~$")
_LINE_REF = re.compile(r"^(?P<path>[^#]*)#L(?P<line>\d+)(?:-L?\d+)?$")


@dataclass(frozen=True)
class Supersession:
    """``old_path#L<old_line>`` is no longer current; ``new_path#L<new_line>`` replaced it (``""`` / 0 when the
    marker does not say by what). ``line`` is the line of ``path`` that holds the marker; ``date`` the marker's
    date (``YYYY-MM-DD``, ``""`` when it has none)."""

    path: str
    line: int
    old_path: str
    old_line: int
    new_path: str
    new_line: int
    date: str = ""


def parse_ref(ref: str, base: str = "") -> tuple[str, int] | None:
    """``(workspace-relative path, line)`` of ``path#L<n>`` cited from the file ``base``; None for anything else
    (no line, a URL, an absolute path, a path out of the workspace)."""
    found = _LINE_REF.match(ref.strip())
    if found is None or int(found["line"]) < 1:
        return None
    path = found["path"].replace("\\", "/")
    if not path:
        path = base
    elif "://" in path or path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        return None
    elif path.startswith(("./", "../")) or ("/" not in path and path not in ROOT_FILES):
        path = posixpath.join(posixpath.dirname(base), path)
    path = posixpath.normpath(path)
    if not path or path == "." or path.startswith("../") or path == "..":
        return None
    return path, int(found["line"])


def parse_supersessions(text: str, path: str) -> list[Supersession]:
    """Every supersession the lines of ``text`` (the file ``path``) declare, in line order."""
    out: list[Supersession] = []
    for n, line in outside_fences(text.split("\n")):
        out.extend(_line_supersessions(line, n + 1, path))
    return out


def _line_supersessions(line: str, n: int, path: str) -> list[Supersession]:
    if "(" not in line and "~~" not in line:
        return []
    out: list[Supersession] = []
    old = _SUPERSEDED.search(line)
    if old is not None:
        target = parse_ref(_ref(old, "o"), path) if _ref(old, "o") else None
        new_path, new_line = target if target else ("", 0)
        out.append(Supersession(path, n, path, n, new_path, new_line, old["date"] or ""))
    elif _struck(line):
        out.append(Supersession(path, n, path, n, "", 0))
    for new in _SUPERSEDES.finditer(line):
        target = parse_ref(_ref(new, "n"), path)
        if target is not None and target != (path, n):
            out.append(Supersession(path, n, target[0], target[1], path, n))
    return out


def _ref(found: re.Match[str], n: str) -> str:
    return found[f"{n}a"] or found[f"{n}b"] or found[f"{n}c"] or ""


def _struck(line: str) -> bool:
    """The whole fact (after the list bullet and the ``[HH:MM]`` stamp) is struck through."""
    rest = _SUPERSEDED.sub("", line[LINE_LEAD.match(line).end() :]).strip()  # type: ignore[union-attr]
    return bool(_STRUCK.match(rest))


def strip_markers(line: str) -> str:
    """``line`` without its supersession markers and strike-through: the fact itself."""
    line = _SUPERSEDES.sub("", _SUPERSEDED.sub("", line))
    return re.sub(r"~~(.+?)~~", r"\1", line).rstrip()


def marker(date: str, ref: str) -> str:
    """The marker ``remember --supersedes`` appends to the old line: `` (superseded YYYY-MM-DD → ref)``."""
    return f" (superseded {date} → {ref})"
