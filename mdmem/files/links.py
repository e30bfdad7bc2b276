"""Links between memory files, as written in Markdown. Pure: text in, links out; names resolved against the
workspace's files.

- ``[[name]]``, ``[[name#Heading]]``, ``[[name|shown text]]``, ``[[#Heading]]`` (a heading of the same file):
  a *wikilink*. ``name`` is a file's name without ``.md`` (matched case-insensitively against every memory
  file's name, any script: ``[[普丽雅]]``), or a workspace-relative path when it holds a ``/``.
- ``[text](other.md)``, ``[text](../people/priya.md#lisbon)``: a relative Markdown link to a ``.md`` file,
  relative to the file that holds it; ``<...>`` around the target and ``%20`` in it work as in Markdown.
- ``aliases: [PR, Priya R.]`` (or a ``- PR`` list under ``aliases:``) in a file's front matter: other names a
  wikilink may use for that file.

Never links: URLs (``https://``, ``mailto:``), images (``![..](..)``), anything in fenced code or inline
code, a target that is absolute or leaves the workspace (refused: kept as a broken link, never followed).
Line-range anchors (``#L4``) are supersession references (mdmem.files.supersession), not headings.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from mdmem.files.fences import outside_fences

__all__ = ["Link", "Resolver", "fold_name", "heading_slug", "parse_links"]

_WIKI = re.compile(r"(?<!!)\[\[([^\[\]\n|]*?)(?:\|([^\[\]\n]*))?\]\]")
_MD = re.compile(
    r"(?<![!\\])\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(\s*(<[^>\n]+>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"\n]*\")?\s*\)"
)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ALIASES = re.compile(r"^aliases\s*:\s*(.*)$", re.IGNORECASE)
_LINE_ANCHOR = re.compile(r"^L\d+(?:-L?\d+)?$")


@dataclass(frozen=True)
class Link:
    """Line ``line`` of ``path`` links to ``target`` (a workspace-relative path, "" for a name) or ``name`` (a
    wikilink's file name, folded), at ``heading`` ("" for the whole file). ``kind`` is ``link``; ``alias`` rows
    say that ``name`` is another name of ``path`` (from its front matter); ``refused`` is a link out of the
    workspace (``target`` as written), kept so that status can show it, never followed."""

    path: str
    line: int
    target: str
    name: str
    heading: str
    kind: str = "link"


def fold_name(name: str) -> str:
    """How a wikilink's name is compared: NFC, case-folded, spaces squeezed, without ``.md``."""
    name = unicodedata.normalize("NFC", name).strip()
    if name.lower().endswith(".md"):
        name = name[:-3]
    return " ".join(name.casefold().split())


def heading_slug(heading: str) -> str:
    """A heading as anchors name it: case-folded, punctuation dropped, spaces as ``-`` (GitHub style, any script)."""
    text = unicodedata.normalize("NFC", heading).strip().casefold()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return re.sub(r"\s+", "-", text)


def parse_links(text: str, path: str) -> list[Link]:
    """Every link (and front-matter alias) of ``text``, the file ``path``, in line order."""
    out: list[Link] = []
    lines = text.split("\n")
    start = 0
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        if end is not None:
            out.extend(_aliases(lines[1:end], path))
            start = end + 1
    for n, line in outside_fences(lines, start):
        if "[" not in line:
            continue
        bare = _CODE_SPAN.sub(lambda m: " " * len(m.group()), line)
        for found in _WIKI.finditer(bare):
            link = _wikilink(found.group(1), path, n + 1)
            if link is not None:
                out.append(link)
        for found in _MD.finditer(bare):
            link = _markdown_link(found.group(1), path, n + 1)
            if link is not None:
                out.append(link)
    return out


def _wikilink(inner: str, path: str, line: int) -> Link | None:
    name, _, heading = inner.partition("#")
    name, heading = name.strip(), heading.strip()
    if _LINE_ANCHOR.match(heading):
        heading = ""
    if not name:
        return Link(path, line, path, "", heading_slug(heading)) if heading else None
    if "/" in name:
        target = _inside(posixpath.normpath(name.replace("\\", "/")))
        if target is None:
            return Link(path, line, name, "", "", "refused")
        return Link(path, line, target if target.lower().endswith(".md") else target + ".md", "", heading_slug(heading))
    return Link(path, line, "", fold_name(name), heading_slug(heading))


def _markdown_link(raw: str, path: str, line: int) -> Link | None:
    raw = raw.strip()
    if raw.startswith("<") and raw.endswith(">"):
        raw = raw[1:-1]
    if not raw or raw.startswith("#") or _SCHEME.match(raw) or raw.startswith("//"):
        return None  # same-page anchor, URL, mailto:, protocol-relative
    target, _, anchor = raw.partition("#")
    target = unquote(target).replace("\\", "/")
    if not target.lower().endswith(".md"):
        return None  # not a memory file (an image, a PDF, a folder)
    heading = "" if _LINE_ANCHOR.match(anchor) else heading_slug(unquote(anchor))
    if target.startswith(("/", "~")):
        return Link(path, line, target, "", "", "refused")
    resolved = _inside(posixpath.normpath(posixpath.join(posixpath.dirname(path), target)))
    if resolved is None:
        return Link(path, line, target, "", "", "refused")
    return Link(path, line, resolved, "", heading)


def _inside(path: str) -> str | None:
    """``path`` (normalised, workspace-relative) when it stays inside the workspace."""
    if not path or path in (".", "..") or path.startswith(("../", "/")):
        return None
    return path


def _aliases(front: list[str], path: str) -> list[Link]:
    out: list[Link] = []
    for i, line in enumerate(front):
        found = _ALIASES.match(line.strip())
        if found is None:
            continue
        value = found.group(1).strip()
        names: list[str] = []
        if value.startswith("[") and value.endswith("]"):
            names = [v for v in value[1:-1].split(",")]
        elif value:
            names = [value]
        else:  # a YAML list on the next lines
            for item in front[i + 1 :]:
                if not item.strip().startswith("- "):
                    break
                names.append(item.strip()[2:])
        for name in names:
            name = name.strip().strip("'\"").strip()
            if name:
                out.append(Link(path, i + 2, "", fold_name(name), "", "alias"))
    return out


class Resolver:
    """Which file a link points to, given the indexed files and the aliases their front matter declares."""

    def __init__(self, files: Iterable[str], aliases: Iterable[Link] = ()) -> None:
        self.files = set(files)
        self.names: dict[str, str] = {}
        for f in sorted(self.files, key=lambda p: (p.count("/"), p)):  # the shallowest file wins a shared name
            self.names.setdefault(fold_name(posixpath.basename(f)), f)
        for a in aliases:
            if a.kind == "alias" and a.path in self.files:
                self.names.setdefault(a.name, a.path)

    def target(self, link: Link) -> str | None:
        """The indexed file ``link`` points to; None when it is broken (or refused)."""
        if link.kind != "link":
            return None
        if link.target:
            if link.target in self.files:
                return link.target
            inside = sorted(f for f in self.files if f.endswith("/" + link.target))  # [[people/bob]] in memory/
            return inside[0] if len(inside) == 1 else None
        return self.names.get(link.name)

    def names_of(self, path: str) -> set[str]:
        """Every name a wikilink may use for ``path``."""
        return {n for n, p in self.names.items() if p == path}
