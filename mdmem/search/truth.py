"""The temporal fact view: what is currently true about a subject, when it changed, and which notes support
each version. Pure: lines, their supersessions and the subject in, facts out (mdmem.engine.truth reads them).

A *fact* is a chain of lines joined by supersessions (mdmem.files.supersession): its current line is the one
no later line supersedes, its history the lines it replaced, newest first, each with the day it was written
and the day it was superseded. A line about the subject that nothing supersedes and that supersedes nothing is
a fact with no history, unless it names what only one version of a fact says: then it is a note supporting
that version. Dates come from the file (a daily log
``memory/YYYY-MM-DD.md``) and the line's ``[YYYY-MM-DD HH:MM]`` or ``[HH:MM]`` stamp; a fact with no date sorts
as the oldest. The view is derived: the files say what is true; it is never authoritative where they are
missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mdmem.files.supersession import LINE_LEAD, Supersession, strip_markers
from mdmem.search.query import (
    STOP_WORDS,
    WORD,
    fold,
    identifier_phrases,
    keyword_terms,
    phrase_pattern,
    query_terms,
)
from mdmem.search.scoring import log_date
from mdmem.util.tokens import CJK_RUN

__all__ = ["FactLine", "Fact", "facts_about", "line_date", "mention_counter", "mentions", "query_names"]

Key = tuple[str, int]
_STAMP = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?(?:\[[ xX]\]\s+)?\[(?:(\d{4}-\d{2}-\d{2})[ T])?(\d{1,2}:\d{2})\]\s*")


@dataclass(frozen=True)
class FactLine:
    """A line of a memory file: where, its fact (bullet, stamp and marks removed) and its date."""

    path: str
    line: int
    text: str
    date: str  # "YYYY-MM-DD" or "YYYY-MM-DD HH:MM"; "" when unknown

    @property
    def ref(self) -> str:
        return f"{self.path}#L{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "text": self.text, "date": self.date or None}


@dataclass
class Fact:
    current: FactLine | None  # None: the newest version is superseded by nothing the index holds
    history: list[tuple[FactLine, str]] = field(default_factory=list)  # (old line, the day it was superseded)
    supports: dict[Key, list[str]] = field(default_factory=dict)  # version -> refs of supporting notes

    def to_dict(self) -> dict[str, Any]:
        cur = self.current
        return {
            "current": None if cur is None else {**cur.to_dict(), "supportedBy": self.supports.get(_key(cur), [])},
            "history": [
                {**old.to_dict(), "supersededOn": on or None, "supportedBy": self.supports.get(_key(old), [])}
                for old, on in self.history
            ],
        }


def line_date(path: str, text: str) -> str:
    """The date of the line ``text`` of ``path``: its own ``[YYYY-MM-DD HH:MM]`` stamp, else the daily log's day
    (with the line's ``[HH:MM]``), else ""."""
    stamp = _STAMP.match(text)
    day = log_date(path)
    if stamp and stamp[1]:
        return f"{stamp[1]} {stamp[2]:0>5}"
    if day is None:
        return ""
    return f"{day.isoformat()} {stamp[2]:0>5}" if stamp else day.isoformat()


def fact_text(text: str) -> str:
    """The fact of a line: without its bullet, check box, stamp, supersession marks and strike-through."""
    return strip_markers(text)[LINE_LEAD.match(strip_markers(text)).end() :].strip()  # type: ignore[union-attr]


def mentions(subject: str, text: str) -> int:
    """How many of the subject's words (stop words aside) the line holds, as words (CJK runs as substrings).
    An identifier's parts count only where the line writes the identifier: ``Nimbus-9 at [14:05]`` does not
    mention ``Nimbus-14``."""
    return mention_counter(subject)(text)


def query_names(query: str) -> str:
    """The words of ``query`` that name something, as written: with a capital or a digit (``Priya``,
    ``Okafor's``, ``Nimbus-14``, ``CI``), stop words and question words aside; "" when none does. A line names
    them all when ``mentions(names, line)`` counts every term of them (an identifier's parts only together)."""
    words = re.findall(r"\w+(?:[-.:/]\w+)*", re.sub(r"['’]s\b", "", query))  # Okafor's: Okafor
    names = [w for w in words if (w[:1].isupper() or any(c.isdigit() for c in w)) and fold(w) not in STOP_WORDS]
    return " ".join(names)


def mention_counter(subject: str) -> Callable[[str], int]:
    """``mentions`` for one subject and many lines: the subject's words and identifiers are taken apart once."""
    terms = [fold(term) for term in keyword_terms(query_terms(subject))]
    cjk = [(t, CJK_RUN.findall(t)) for t in terms]
    phrases = [(re.compile(phrase_pattern(p)), p.split()) for p in identifier_phrases(fold(subject))]

    def count(text: str) -> int:
        folded = fold(text)
        stems = {_stem(w) for w in WORD.findall(CJK_RUN.sub(" ", folded))}
        apart = {part for pattern, parts in phrases if not pattern.search(folded) for part in parts}
        return sum(
            0 if t in apart else all(run in folded for run in runs) if runs else _stem(t) in stems for t, runs in cjk
        )

    return count


def _stem(word: str) -> str:
    """``word`` without an English inflection (``lives`` and ``live``, ``moved`` and ``move`` meet)."""
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def facts_about(
    subject: str,
    about: Sequence[Key],
    lines: Mapping[Key, str],
    supersessions: Sequence[Supersession],
    *,
    max_facts: int = 5,
) -> list[Fact]:
    """The facts about ``subject`` the lines ``about`` (its lines, best first) belong to, those with a history
    first. ``lines`` holds the text of every line known (those ``about`` and those the supersessions name). A
    line about the subject that names what only one version of a fact says (``dinner with Priya in Lisbon``
    for ``Priya is back in Lisbon``) supports that version instead of standing as a fact of its own."""
    newer: dict[Key, list[tuple[Key | None, str]]] = {}
    older: dict[Key, list[Key]] = {}
    for s in supersessions:
        old = (s.old_path, s.old_line)
        new = (s.new_path, s.new_line) if s.new_path else None
        if old not in lines or (new is not None and new not in lines):
            continue
        if (new, s.date) not in newer.get(old, []):
            newer.setdefault(old, []).append((new, s.date))
        if new is not None and old not in older.get(new, []):
            older.setdefault(new, []).append(old)
    seen: set[Key] = set()
    chains: list[set[Key]] = []
    for start in about:
        if start in seen or start not in lines:
            continue
        chain = _component(start, newer, older)
        seen |= chain
        chains.append(chain)
    changed = [c for c in chains if len(c) > 1 or any(k in newer for k in c)]
    facts = [_fact(c, lines, newer) for c in changed]  # those with a history first
    kept = facts[:max_facts]
    words = [_distinctive(f, subject) for f in kept]
    tails = {_key(v): _tail(v.text, subject) for f in kept for v in _versions(f)}
    for chain in chains:
        if len(chain) > 1 or any(k in newer for k in chain):
            continue
        (k,) = chain
        held, named = _words(lines[k]), _named(lines[k])
        backed = next(
            (
                (f, v)
                for f, ws in zip(kept, words, strict=True)
                for v, w in ws.items()
                if _backs(held, named | tails[v], w)
            ),
            None,
        )
        if backed is not None:
            backed[0].supports.setdefault(backed[1], []).append(f"{k[0]}#L{k[1]}")
        else:
            facts.append(_fact(chain, lines, newer))
    return facts[:max_facts]


def _component(
    start: Key, newer: Mapping[Key, list[tuple[Key | None, str]]], older: Mapping[Key, list[Key]]
) -> set[Key]:
    out, todo = set(), [start]
    while todo:
        k = todo.pop()
        if k in out:
            continue
        out.add(k)
        todo.extend(n for n, _ in newer.get(k, []) if n is not None)
        todo.extend(older.get(k, []))
    return out


def _fact(chain: set[Key], lines: Mapping[Key, str], newer: Mapping[Key, list[tuple[Key | None, str]]]) -> Fact:
    made = {k: FactLine(k[0], k[1], fact_text(lines[k]), line_date(k[0], lines[k])) for k in chain}
    by_date = sorted(chain, key=lambda k: (made[k].date, k), reverse=True)
    current = next((k for k in by_date if k not in newer), None)
    history, also = [], []
    for k in by_date:
        if k == current:
            continue
        if k not in newer:  # current too (it replaced the same line): it backs the current line
            also.append(f"{k[0]}#L{k[1]}")
            continue
        marks = newer[k]
        on = next((d for _, d in marks if d), "") or next(
            (made[n].date[:10] for n, _ in marks if n in made and made[n].date), ""
        )
        history.append((made[k], on))
    fact = Fact(made[current] if current is not None else None, history)
    if current is not None and also:
        fact.supports[current] = also
    return fact


_VALUE = re.compile(r"\w+(?:[-./:]\w+)*")  # jenkins-01, v2.3, 10:30 stay one token


def _words(text: str) -> set[str]:
    """The content words of a line's fact, compounds kept whole; CJK runs as they are."""
    return {
        _stem(w)
        for w in _VALUE.findall(fold(fact_text(text)))
        if (len(w) > 2 or any(ch.isdigit() for ch in w)) and w not in STOP_WORDS
    }


def _named(text: str) -> set[str]:
    """The words of a line's fact that name a value: a capitalised word after the first, one with a digit, CJK."""
    tokens = _VALUE.findall(fact_text(text))
    return {
        _stem(fold(t))
        for i, t in enumerate(tokens)
        if (i > 0 and t[0].isupper()) or any(ch.isdigit() for ch in t) or CJK_RUN.search(t)
    }


def _tail(text: str, subject: str) -> set[str]:
    """The last two content words of a fact, where its value usually is (``is buildkite``, ``moved to Lisbon``)."""
    subject_words = {_stem(fold(t)) for t in query_terms(subject)}
    words = [_stem(w) for w in _VALUE.findall(fold(text)) if w not in STOP_WORDS and _stem(w) not in subject_words]
    return set(words[-2:])


def _versions(fact: Fact) -> list[FactLine]:
    return ([fact.current] if fact.current else []) + [old for old, _ in fact.history]


def _backs(held: set[str], named: set[str], distinctive: set[str]) -> bool:
    """A note backs a version when it holds one of the version's own values (a name, a number, one of its last
    words) or shares two of its words."""
    shared = held & distinctive
    return bool(shared & named) or len(shared) >= 2


def _distinctive(fact: Fact, subject: str) -> dict[Key, set[str]]:
    """Each version's words that neither the subject nor the other versions have: what a supporting note names."""
    versions = _versions(fact)
    subject_words = {_stem(fold(t)) for t in query_terms(subject)}
    sets = {_key(v): _words(v.text) - subject_words for v in versions}
    out = {}
    for k, ws in sets.items():
        others = set().union(*(w for o, w in sets.items() if o != k))
        out[k] = ws - others
    return out


def _key(line: FactLine) -> Key:
    return (line.path, line.line)
