"""What a line says of its subject when a change is written in other words: ``Priya lives in Berlin`` in March,
``Priya relocated to Lisbon`` in October. Pure: a line's text in, its frames out (mdmem.search.grouping groups
the lines whose frames agree).

A *frame* is an attribute that names usually fill (where someone lives, where they work, what a project uses
for something) and the verbs people write for it, stating it or changing it:

- ``residence``: lives in, is based in, resides in, moved (back) to, relocated to, is back in, settled in, ...
- ``employer``: works at / for, joined, started (a new job) at, was hired by, is employed at / by, ...
- ``uses:<what>``: uses V for <what>, switched / moved / migrated / changed its <what> to V, ...
- ``uses``: uses V, switched to V, migrated to V, moved to V, adopted V, runs on V, ... (with no ``for <what>``)

A line has a frame when it reads *subject, verb, value*: the subject is the words before the verb (one to
``MAX_SUBJECT``, not a bare pronoun but ``he``/``she``/``they``... which could be anyone), the value is the
run of capitalised words or words with digits right after the verb (``Lisbon``, ``New York``, ``GitLab``,
``Acme``), at most ``MAX_VALUE`` words, and at most ``MAX_TAIL`` words follow it. A value must be a name:
``Priya joined the call``, ``Priya moved to a new flat`` have none and are not frames. A line that names a
particular ``<what>`` (``uses Jenkins for builds``) is compared only with lines naming the same one, so
``uses Jenkins for builds`` and ``uses Jira for tickets`` never meet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from mdmem.files.supersession import LINE_LEAD
from mdmem.search.query import fold

__all__ = ["Frame", "LINES_REMEMBERED", "MAX_SUBJECT", "MAX_TAIL", "frames_of"]

LINES_REMEMBERED = 8192
MAX_SUBJECT = 6
MAX_VALUE = 4
MAX_TAIL = 4
_TOKEN = re.compile(r"\w+(?:['’.\-]\w+)*")
_FILLER = frozenset(
    "now nowadays currently still again actually officially finally recently just also today yesterday "
    "meanwhile lately has have had".split()
)
_PRONOUNS = frozenset("he she they it this that who which someone somebody one there".split())
_DET = r"(?:(?:its|their|his|her|our|my|the|your) )?"  # optional
# (frame, pattern over the folded words after the subject, fillers removed). The value follows the match;
# a ``what`` group names the thing a ``uses`` frame is about.
_FRAMES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("residence", r"(?:is |are )?(?:living|lives|live|resides|reside|based|settled|settling) in "),
        ("residence", r"(?:moved|relocated|moved back|relocated back|went back|is back|are back) (?:to|in) "),
        ("residence", r"(?:is |are )?back in "),
        ("residence", r"(?:made|makes) (?:a |their |his |her )?home in "),
        ("employer", r"(?:is |are )?(?:works|work|working) (?:at|for) "),
        ("employer", r"(?:joined|rejoined) "),
        ("employer", r"(?:started|began) (?:a |her |his |their )?(?:new )?(?:job|role|position|working) (?:at|for) "),
        ("employer", r"(?:started|began) at "),
        ("employer", r"(?:took|accepted|got) (?:a |an )?(?:new )?(?:job|offer|role|position) (?:at|from|with) "),
        ("employer", r"(?:was |got |is |were )?(?:hired|employed) (?:by|at) "),
        ("uses:", r"(?:is |are )?(?:uses|use|using|relies on|rely on) (?P<value>.+?) for (?P<what>\w+(?: \w+)?)\s*$"),
        ("uses:", rf"(?:switched|moved|migrated|changed|ported|converted) {_DET}(?P<what>\w+(?: \w+)??) (?:over )?to "),
        ("uses", r"(?:is |are )?(?:uses|use|using|relies on|rely on|runs on|run on|adopted) "),
        ("uses", r"(?:switched|migrated|changed|ported) (?:over )?to "),
    )
)


# The words a frame's verb can start with: a line holding none of them is no frame (the cheap test first).
_FIRST = frozenset(
    """is are was were living lives live resides reside based settled settling moved relocated went back made
    makes works work working joined rejoined started began took accepted got hired employed uses use using
    relies rely runs run adopted switched migrated changed ported converted""".split()
)


@dataclass(frozen=True)
class Frame:
    subject: tuple[str, ...]  # folded words
    name: str  # "residence", "employer", "uses", "uses:builds"
    value: tuple[str, ...]  # folded words of the value


@lru_cache(maxsize=LINES_REMEMBERED)
def frames_of(text: str) -> tuple[Frame, ...]:
    """The frames ``text`` (one line) states; empty for a line that is not *subject, verb, value*. Remembered
    for the last ``LINES_REMEMBERED`` lines: the same chunks come back search after search."""
    rest = text[LINE_LEAD.match(text).end() :]  # type: ignore[union-attr]
    low = fold(rest)
    if _FIRST.isdisjoint(low.split()):
        return ()
    raw = _TOKEN.findall(rest)
    folded = _TOKEN.findall(low)
    if len(folded) != len(raw):  # folding merged or split a word: fold word by word
        folded = [fold(w) for w in raw]
    keep = [i for i, w in enumerate(folded) if w not in _FILLER]
    kept = [raw[i] for i in keep]
    words = [folded[i] for i in keep]
    out: list[Frame] = []
    for start in range(1, min(len(words), MAX_SUBJECT + 1)):
        if words[start] not in _FIRST:
            continue
        subject = tuple(words[:start])
        if len(subject) == 1 and subject[0] in _PRONOUNS:
            continue
        after = " ".join(words[start:]) + " "
        for name, pattern in _FRAMES:
            m = pattern.match(after)
            if m is None:
                continue
            frame = _frame(name, m, kept, start, after)
            if frame is not None:
                out.append(Frame(subject, frame[0], frame[1]))
        if out:
            return _specific(out)
    return ()


def _frame(name: str, m: re.Match[str], kept: list[str], start: int, rest: str) -> tuple[str, tuple[str, ...]] | None:
    groups = m.groupdict()
    if groups.get("value") is not None:  # uses V for what: the value sits between
        offset = start + len(rest[: m.start("value")].split())
        value = _name_run(kept[offset : offset + len(groups["value"].split())])
        if value is None or len(value) != len(groups["value"].split()):
            return None
        return f"uses:{groups['what']}", value
    offset = start + len(rest[: m.end()].split())
    value = _name_run(kept[offset:])
    if value is None or len(kept) - offset - len(value) > MAX_TAIL:
        return None
    return (f"uses:{groups['what']}" if groups.get("what") else name), value


def _name_run(words: list[str]) -> tuple[str, ...] | None:
    """The leading run of name words (capitalised, or holding a digit or a capital inside), folded; None when
    the first word is not one or the run is longer than ``MAX_VALUE``."""
    run: list[str] = []
    for w in words:
        if w[:1].isupper() or any(c.isdigit() for c in w) or any(c.isupper() for c in w[1:]):
            run.append(fold(w))
        else:
            break
    return tuple(run) if 0 < len(run) <= MAX_VALUE else None


def _specific(frames: list[Frame]) -> tuple[Frame, ...]:
    """A line naming what it uses something for is compared only on that (never on the bare ``uses``)."""
    if any(f.name.startswith("uses:") for f in frames):
        frames = [f for f in frames if f.name != "uses"]
    return tuple(dict.fromkeys(frames))
