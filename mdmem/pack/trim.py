"""Line-level trimming for ContextPack: which lines of a candidate chunk carry the match. Pure.

A line's score is ``vector weight x`` the similarity of the best stored window vector covering it (the
windows the indexer embedded, ~``chunking.windowTokens`` of whole lines) ``+ keyword weight x`` the
IDF-weighted share of the query's terms it holds (IDF over the candidates' lines, terms matched as keyword
search matches them). The focus is the run of up to ``span`` content lines of one section (no heading between
them) whose scores add up best (in a chat log a question and its answer, in notes a fact and its neighbour),
then ``context`` content lines before and after it in that section, and the section's heading line when only
blank lines separate it from them. ``mdmem.pack`` asks for narrower ranges (no context, then one line)
when the first does not fit the budget.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mdmem.search.query import WORD, fold, phrase_pattern
from mdmem.search.scoring import same_stem
from mdmem.util.redaction import find_secrets, marker
from mdmem.util.tokens import CJK_RUN

_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Window:
    """A stored window vector of a chunk: its first and last file line (1-based) and its query similarity."""

    first: int
    last: int
    similarity: float


# -- lines -------------------------------------------------------------------------------------------
_CACHE: OrderedDict[int, tuple[list[str], FileLines]] = OrderedDict()
_CACHE_MAX = 512
_CACHE_LOCK = threading.Lock()


class FileLines:
    """One file's lines with its heading lines indexed (fenced code blocks skipped)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.headings: list[int] = []  # 1-based line numbers, ascending
        fence: str | None = None
        for n, line in enumerate(lines, start=1):
            m = _FENCE.match(line)
            if m:
                fence = None if fence and m[1][0] == fence[0] and len(m[1]) >= len(fence) else fence or m[1]
            elif fence is None and _HEADING.match(line):
                self.headings.append(n)
        self._heading_set = set(self.headings)
        # (secrets, line start offsets), found on the first redacted_text(); one assignment, as threads share it
        self._secrets: tuple[list[tuple[int, int, str]], list[int]] | None = None

    @classmethod
    def of(cls, lines: list[str]) -> FileLines:
        """``FileLines(lines)``, reused while the same list comes back: the pack's file reader returns one list
        per unchanged file, so a long-running process (the service) finds headings and secrets once per file
        version, not once per pack. The cache holds the list itself, so its ``id`` is never reused meanwhile."""
        with _CACHE_LOCK:
            hit = _CACHE.get(id(lines))
            if hit is not None and hit[0] is lines:
                _CACHE.move_to_end(id(lines))
                return hit[1]
        made = cls(lines)
        with _CACHE_LOCK:
            _CACHE[id(lines)] = (lines, made)
            while len(_CACHE) > _CACHE_MAX:
                _CACHE.popitem(last=False)
        return made

    def is_heading(self, n: int) -> bool:
        return n in self._heading_set

    def is_content(self, n: int) -> bool:
        return 1 <= n <= len(self.lines) and bool(self.lines[n - 1].strip()) and n not in self._heading_set

    def heading_above(self, n: int) -> int | None:
        """The nearest heading line before line ``n``."""
        i = bisect.bisect_left(self.headings, n) - 1
        return self.headings[i] if i >= 0 else None

    def text(self, start: int, end: int) -> str:
        return "\n".join(self.lines[start - 1 : end])

    def redacted_text(self, start: int, end: int) -> str:
        """``text(start, end)`` with secrets replaced by ``[REDACTED:<kind>]`` (mdmem.util.redaction). Secrets are
        found in the whole file, so a range holding only part of one (the middle of a PEM block) loses that
        part too."""
        if self._secrets is None:
            offsets = list(itertools.accumulate((len(line) + 1 for line in self.lines), initial=0))
            self._secrets = (find_secrets("\n".join(self.lines)), offsets)
        secrets, offsets = self._secrets
        text = self.text(start, end)
        if not secrets:
            return text
        a, b = offsets[start - 1], offsets[start - 1] + len(text)
        parts, pos = [], a
        for s, e, kind in secrets:
            if e <= a or s >= b:
                continue
            s, e = max(s, a), min(e, b)
            parts += [text[pos - a : s - a], marker(kind)]
            pos = e
        return "".join(parts) + text[pos - a :]


class TermMatcher:
    """Which query terms a line holds: words by a shared stem-like prefix of up to five letters, as keyword
    search attributes matches (``scoring.same_stem``), CJK terms as substrings; case and accents folded as
    FTS5 folds them. One regular expression finds the candidate words of a line; each distinct word found
    is attributed to its terms once. An identifier's phrase (a term holding a space: ``nimbus 14``) is held by
    a line that writes its parts together (``query.phrase_pattern``)."""

    def __init__(self, terms: Sequence[str]) -> None:
        folded = [(term, fold(term)) for term in terms]
        self.phrases = [(term, re.compile(phrase_pattern(t))) for term, t in folded if " " in t]
        self.cjk = [(term, t) for term, t in folded if CJK_RUN.fullmatch(t)]
        self.words = [(term, t) for term, t in folded if not CJK_RUN.fullmatch(t) and WORD.fullmatch(t)]
        alternatives = sorted({a for _, t in self.words for a in _alternatives(t)}, key=len, reverse=True)
        self.pattern = _words_pattern(tuple(alternatives)) if alternatives else None
        self._memo: dict[str, tuple[str, ...]] = {}

    def held(self, line: str) -> set[str]:
        folded = fold(line)
        found = {term for term, t in self.cjk if t in folded}
        found.update(term for term, pattern in self.phrases if pattern.search(folded))
        if self.pattern is not None:
            plain = folded if folded.isascii() else CJK_RUN.sub(" ", folded)
            for word in self.pattern.findall(plain):
                terms = self._memo.get(word)
                if terms is None:
                    terms = self._memo[word] = tuple(term for term, t in self.words if same_stem(word, t))
                found.update(terms)
        return found


@functools.lru_cache(maxsize=1024)
def _words_pattern(alternatives: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern per set of query words (``re``'s own cache of 512 churns under a service's many queries)."""
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)")


def line_terms(line: str, terms: Sequence[str]) -> set[str]:
    """The query terms ``line`` holds (see TermMatcher)."""
    return TermMatcher(terms).held(line)


def _alternatives(t: str) -> list[str]:
    """Regex alternatives for the words that may share a stem with term ``t`` (``scoring.same_stem``)."""
    if len(t) < 3:
        return [re.escape(t)]
    return [re.escape(t[:5]) + r"\w*", re.escape(t[:3])] + ([re.escape(t[:4])] if len(t) >= 4 else [])


def term_weights(line_sets: Sequence[set[str]]) -> dict[str, float]:
    """IDF of each term over the candidates' lines: rare terms locate the evidence, common ones do not."""
    n = max(1, len(line_sets))
    df: dict[str, int] = {}
    for held in line_sets:
        for t in held:
            df[t] = df.get(t, 0) + 1
    return {t: math.log(1 + n / d) for t, d in df.items()}


def focus_range(
    f: FileLines,
    start: int,
    end: int,
    keyword: Mapping[int, float],
    windows: Sequence[Window],
    weights: tuple[float, float],
    span: int = 1,
    context: tuple[int, int] = (1, 1),
) -> tuple[int, int]:
    """The lines of chunk ``start..end`` worth keeping: the run of up to ``span`` content lines of one section
    whose scores add up best, ``context`` content lines before and after it within that section, and the
    section's heading line when only blank lines separate it from them."""
    content = [n for n in range(start, end + 1) if f.is_content(n)]
    if not content:
        return start, end
    lo, hi = content[0], content[-1]
    if len(content) > span + sum(context):
        wv, wt = weights
        scores = []
        for n in content:
            vec = max((w.similarity for w in windows if w.first <= n <= w.last), default=0.0)
            scores.append(wv * vec + wt * keyword.get(n, 0.0))
        runs = _runs(f, content, span)
        best = max(runs, key=lambda run: (sum(scores[run[0] : run[1] + 1]), -run[0]))
        if max(scores) > min(scores):  # else no line-level signal: the chunk stays whole
            lo, hi = content[best[0]], content[best[1]]
            for step, want in ((-1, context[0]), (1, context[1])):
                n, taken = (lo if step < 0 else hi) + step, 0
                while taken < want and 1 <= n <= len(f.lines) and not f.is_heading(n):
                    if f.is_content(n):
                        taken += 1
                        lo, hi = min(lo, n), max(hi, n)
                    n += step
    above = lo - 1
    while above >= 1 and not f.lines[above - 1].strip():
        above -= 1
    if above >= 1 and f.is_heading(above):
        lo = above
    return lo, hi


def _runs(f: FileLines, content: Sequence[int], span: int) -> list[tuple[int, int]]:
    """Runs of up to ``span`` consecutive content lines (indexes into ``content``) that no heading splits: a
    one-line answer under its own heading is not paired with a line of the section before it."""
    runs = []
    for i in range(len(content)):
        j = i
        while (
            j + 1 < len(content) and j - i + 1 < span and f.heading_above(content[j + 1]) == f.heading_above(content[i])
        ):
            j += 1
        runs.append((i, j))
    return runs
