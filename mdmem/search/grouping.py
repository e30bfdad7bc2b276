"""Implicit supersession, conservative: two dated lines that say the same thing about the same subject with a
different value (``Priya moved to Berlin`` in March, ``Priya moved to Lisbon`` in October) form a group; the
newer supersedes the older. Pure: lines in, supersessions out (mdmem.search.hybrid applies them to a search).

Two lines group when, after the list bullet, the stamp and a few words that say nothing of the value
(``now``, ``currently``, ``still``...) are set aside and the rest is split into words:

- they start with the same words (the subject and what is said of it: ``priya moved to``), at least
  ``MIN_SHARED`` of them and at least half of the longer line, the last of them a word that introduces a value
  (``is``, ``to``, ``in``, ``uses``, ``moved``..., or a ``key: value`` line); ``restic backup report 3`` and
  ``restic backup report 7`` are numbered events, not a changed value;
- what follows differs (the value), and is short on both sides (at most ``MAX_VALUE`` words);
- both are dated (a daily log, or a ``[YYYY-MM-DD HH:MM]`` stamp) at different moments; neither is a question.

So the subject has to be the same words at the same place: ``Priya moved to Berlin`` and ``Bob moved to
Berlin`` differ in their first word, ``Project Atlas ships in May`` and ``Project Orion ships in May`` in
their second, and are never grouped. Recency decides only within a group, never across the index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from mdmem.files.supersession import LINE_LEAD, Supersession, parse_supersessions
from mdmem.search.frames import LINES_REMEMBERED, frames_of
from mdmem.search.query import fold
from mdmem.search.truth import line_date

__all__ = ["MAX_VALUE", "MIN_SHARED", "implicit_supersessions"]

MIN_SHARED = 2
MAX_VALUE = 5
_WORDS = re.compile(r"\w+(?:[-.:/]\w+)*")
# What ends the shared part of two lines that state a value: a copula, a preposition, a verb of state or of
# change. "Restic backup report 3" / "... report 7" end their shared part on a noun: numbered events, not a value.
_CONNECTORS = frozenset(
    """is are was were be been am s to into from in at on of for with by as than via uses use using used prefers
    prefer preferred likes like liked loves love loved lives live lived living works work worked working moved
    moves move relocated switched switch changed change became become becomes called named renamed costs cost
    pays paid earns weighs equals drives drove owns has have had runs ran set based located upgraded downgraded
    migrated transferred promoted joined left chose picked wants wanted needs goes went stays stayed""".split()
)
_FILLER = frozenset(
    "now nowadays currently still again actually officially finally recently just also today yesterday anymore new "
    "current latest "
    "meanwhile then lately".split()
)
Line = tuple[str, int, str]  # path, line number, text


@lru_cache(maxsize=LINES_REMEMBERED)
def _words(text: str) -> tuple[str, ...]:
    """The words of a line after its bullet and stamp, folded, without fillers (remembered, as frames are)."""
    rest = text[LINE_LEAD.match(text).end() :]  # type: ignore[union-attr]
    return tuple(w for w in _WORDS.findall(fold(rest)) if w not in _FILLER)


def _groups(a: Sequence[str], b: Sequence[str], colon: bool) -> bool:
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    tail_a, tail_b = a[shared:], b[shared:]
    return (
        shared >= MIN_SHARED
        and (a[shared - 1] in _CONNECTORS or colon)
        and 2 * shared >= max(len(a), len(b))
        and bool(tail_a)
        and bool(tail_b)
        and tail_a != tail_b
        and len(tail_a) <= MAX_VALUE
        and len(tail_b) <= MAX_VALUE
    )


def _marked(text: str, path: str) -> bool:
    if "~~" in text:
        return True
    low = text.lower()
    return (
        "(" in text
        and ("supersed" in low or "replace" in low or "outdated" in low)
        and bool(parse_supersessions(text, path))
    )


@lru_cache(maxsize=LINES_REMEMBERED)
def _keyed(text: str) -> bool:
    """Whether a line names its key first (``Wifi password: hunter2``), remembered as its words are."""
    return _colon_after(text, _words(text)[:2])


def _colon_after(text: str, words: Sequence[str]) -> bool:
    """``Wifi password: hunter2``: the line names its key, then a colon or an equals sign, then the value."""
    rest = fold(text[LINE_LEAD.match(text).end() :])  # type: ignore[union-attr]
    cut = max(rest.find(":"), rest.find("="))
    return cut > 0 and all(w in rest[:cut] for w in words)


def implicit_supersessions(lines: Sequence[Line], explicit: Sequence[Supersession] = ()) -> list[Supersession]:
    """The implicit supersessions among ``lines`` (each line superseded by the next newer line of its group),
    leaving out lines an ``explicit`` supersession (or their own marks) already speaks of. Each has ``path`` ""
    and ``line`` 0: no line of any file declares it."""
    spoken = {(s.old_path, s.old_line) for s in explicit} | {(s.new_path, s.new_line) for s in explicit}
    reworded, framed = _reworded(lines, spoken)
    candidates: dict[tuple[str, str], list[Line]] = {}
    for line in lines:  # cheap first: bucket by the first two words; most buckets hold one line
        head = _words(line[2])
        if len(head) >= MIN_SHARED:
            candidates.setdefault((head[0], head[1]), []).append(line)
    facts: dict[tuple[str, str], list[tuple[str, Line, tuple[str, ...]]]] = {}
    for key, found in candidates.items():
        if len(found) < 2:
            continue
        for path, n, text in found:
            when = "" if (path, n, text) in framed else _eligible(path, n, text, spoken)
            if when:
                facts.setdefault(key, []).append((when, (path, n, text), _words(text)))
    out: list[Supersession] = []
    for bucket in facts.values():
        if len(bucket) < 2:
            continue
        bucket.sort(key=lambda f: f[0], reverse=True)  # newest first
        superseded: set[int] = set()
        for i, (when, new, words) in enumerate(bucket):  # each line supersedes the nearest older one of its group
            for j in range(i + 1, len(bucket)):
                old_when, old, old_words = bucket[j]
                colon = _keyed(new[2]) and _keyed(old[2])
                if j not in superseded and old_when < when and _groups(words, old_words, colon):
                    superseded.add(j)
                    out.append(Supersession("", 0, old[0], old[1], new[0], new[1], when[:10]))
                    break
    return out + reworded


def _eligible(path: str, n: int, text: str, spoken: set[tuple[str, int]]) -> str:
    """The date of a line that may join a group; "" for a heading, a question, an undated line, or a line an
    explicit supersession or its own marks speak of (the explicit convention speaks for it)."""
    return "" if (path, n) in spoken else _dated(path, text)


@lru_cache(maxsize=LINES_REMEMBERED)
def _dated(path: str, text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("#") or stripped.endswith("?") or _marked(text, path):
        return ""
    return line_date(path, text)


def _reworded(lines: Sequence[Line], spoken: set[tuple[str, int]]) -> tuple[list[Supersession], set[Line]]:
    """The changes written in any words (mdmem.search.frames): lines with the same subject and frame, in date
    order; when the value changes, every line of the value before is superseded by the first line of the new
    one (``lives in Berlin``, ``is back in Berlin``, then ``relocated to Lisbon``: both Berlin lines are
    superseded by the Lisbon one). Also the lines in such groups, which the shared-words rule leaves alone."""
    by_frame: dict[tuple[tuple[str, ...], str], list[tuple[str, Line, tuple[str, ...]]]] = {}
    for line in lines:
        frames = frames_of(line[2])  # cheap for most lines: they hold none of the frames' verbs
        when = _eligible(*line, spoken) if frames else ""
        for frame in frames if when else ():
            by_frame.setdefault((frame.subject, frame.name), []).append((when, line, frame.value))
    out: list[Supersession] = []
    grouped: set[Line] = set()
    olds: set[tuple[str, int]] = set()
    for group in by_frame.values():
        if len(group) < 2 or len({value for _, _, value in group}) < 2:
            continue
        grouped.update(line for _, line, _ in group)
        group.sort(key=lambda f: f[0])  # oldest first
        version: list[tuple[str, Line]] = []  # the lines of the value in force
        value: tuple[str, ...] = ()
        for when, line, said in group:
            if version and said != value:
                for old_when, old in version:
                    if old_when < when and (old[0], old[1]) not in olds:
                        olds.add((old[0], old[1]))
                        out.append(Supersession("", 0, old[0], old[1], line[0], line[1], when[:10]))
                version = []
            version.append((when, line))
            value = said
    out.sort(key=lambda s: s.date, reverse=True)  # newest first, as the shared-words rule gives them
    return out, grouped


Span = tuple[str, int, int, str]  # path, start line, end line, text: a result's chunk


def span_lines(span: Span) -> list[Line]:
    """The lines of a result's chunk (none for a slice of one long line)."""
    path, start, end, text = span
    parts = text.split("\n")
    return (
        list(zip([path] * len(parts), range(start, end + 1), parts, strict=True))
        if len(parts) == end - start + 1
        else []
    )


def newer_first(spans: Sequence[Span], supersessions: Sequence[Supersession]) -> list[int]:
    """The order of ``spans`` (indices) in which a result all of whose facts are superseded comes right after the
    result holding what superseded them, when that result ranked lower; every other result keeps its place."""
    order = list(range(len(spans)))
    if not supersessions:
        return order
    where: dict[tuple[str, int], int] = {}
    for i, (path, start, end, _) in enumerate(spans):
        for n in range(start, end + 1):
            where.setdefault((path, n), i)
    replaced_by: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for s in supersessions:
        replaced_by.setdefault((s.old_path, s.old_line), []).append((s.new_path, s.new_line))
    for i, span in enumerate(spans):
        facts = [(p, n) for p, n, t in span_lines(span) if t.strip() and not t.lstrip().startswith("#")]
        if not facts or not all(f in replaced_by for f in facts):
            continue
        news = {where.get(new) for f in facts for new in replaced_by[f]}
        later = [j for j in news if j is not None and order.index(j) > order.index(i)]
        if later:
            j = max(later, key=order.index)
            order.remove(i)
            order.insert(order.index(j) + 1, i)
    return order
