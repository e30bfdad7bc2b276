"""ContextPack: search candidates in; trimmed, merged, budgeted items with citations and receipts out.

Pure given a search outcome and file reads (``lines_of``). Rules (also in the README, "Context packs"):

- Candidates come in the search's ranking order. Below ``minScore`` a candidate is excluded
  (``below_min_score``) unless it holds every query term, the rule ``memory_search`` applies; in keyword
  mode no threshold applies.
- **Trimming.** A candidate chunk is cut to its focus line (the content line scoring best: the
  similarity of the best stored window vector that covers it, fused with the IDF-weighted share of the
  query's terms it holds) plus ``context`` content lines on each side. A chunk with no line-level signal
  (no window vectors and no term on any line) or with at most ``2 * context + 1`` content lines stays
  whole. The text of an item is exactly lines ``startLine..endLine`` of the file. When the section's
  heading line (the nearest Markdown heading above) is outside the range it is kept beside the item
  (``heading``, ``headingLine``) and printed above it in the bundle.
- **Selection.** Greedy in ranking order under ``budget_tokens``: a candidate whose range overlaps or
  touches an included item of the same file is merged into it (``merged_into``) or, when inside it
  already, dropped (``duplicate_of``); one whose words are nearly those of an included item (the same
  note in another file) is dropped (``duplicate_of``); then ``max_items`` and the budget
  (``over_budget``; a smaller candidate further down may still fit).
- **Budget.** Costs are counted with ``count`` (the provider's tokenizer, or the estimate); the whole
  bundle is counted again at the end and the last additions are undone until it fits, so
  ``usedTokens <= budgetTokens`` always holds.
- **Receipts.** One per candidate, in ranking order: ref, scores, decision and reason; never any text.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from mdmemory.search import Hit, _fold, contains_all_terms, log_date, query_terms
from mdmemory.tokens import CJK_RUN, TokenCounter, estimate_tokens
from mdmemory.workspace import ROOT_FILES

HEADER = "Memory excerpts, most relevant first; each ends with its Source (path#lines): cite it when you use it."
SEPARATOR = "\n\n"
NEAR_DUPLICATE = 0.8  # word-set Jaccard at or above which two items say the same thing
_WORD = re.compile(r"\w+", re.UNICODE)
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")

LinesOf = Callable[[str], "list[str] | None"]
"""A file's lines (``\\n``-split, ``\\r\\n`` normalised) by workspace-relative path; None when unreadable."""


@dataclass(frozen=True)
class Window:
    """A stored window vector of a chunk: its first and last file line (1-based) and its query similarity."""

    first: int
    last: int
    similarity: float


@dataclass(frozen=True)
class PackItem:
    path: str
    start_line: int
    end_line: int
    text: str
    score: float
    source: str
    kind: str  # "curated", "daily" or "extra"
    date: str | None = None
    heading: str | None = None  # the section's heading line when it is outside start_line..end_line
    heading_line: int | None = None

    @property
    def ref(self) -> str:
        return cite(self.path, self.start_line, self.end_line)

    def block(self) -> str:
        """The item as printed in the bundle: heading line, text, then its citation."""
        head = f"{self.heading}\n" if self.heading else ""
        return f"{head}{self.text}\nSource: {self.ref}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ref": self.ref,
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "text": self.text,
            "score": round(self.score, 4),
            "source": self.source,
            "kind": self.kind,
        }
        if self.date:
            out["date"] = self.date
        if self.heading is not None:
            out["heading"], out["headingLine"] = self.heading, self.heading_line
        return out


@dataclass(frozen=True)
class Receipt:
    """Why one candidate is or is not in the pack. Holds no memory text (safe to log)."""

    rank: int
    ref: str
    vector_score: float | None
    keyword_score: float | None
    score: float
    decision: str  # "included" or "excluded"
    reason: str  # selected, merged_into <ref>, below_min_score, over_budget, duplicate_of <ref>, max_items, stale
    tokens: int | None = None  # what including it cost (or would have cost)

    def to_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(float(x), 4)

        out = {
            "rank": self.rank,
            "ref": self.ref,
            "vectorScore": r(self.vector_score),
            "keywordScore": r(self.keyword_score),
            "score": r(self.score),
            "decision": self.decision,
            "reason": self.reason,
        }
        return out if self.tokens is None else {**out, "tokens": self.tokens}


@dataclass(frozen=True)
class Pack:
    query: str
    budget_tokens: int
    used_tokens: int
    items: list[PackItem]
    bundle_text: str
    mode: str
    receipts: list[Receipt] = field(default_factory=list)

    def to_dict(self, trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "budgetTokens": self.budget_tokens,
            "usedTokens": self.used_tokens,
            "items": [i.to_dict() for i in self.items],
            "bundleText": self.bundle_text,
            "mode": self.mode,
        }
        if trace:
            out["trace"] = [r.to_dict() for r in self.receipts]
        return out


def cite(path: str, start: int, end: int) -> str:
    """``path#Lx-Ly``, or ``path#Lx`` for one line."""
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"


def kind_of(path: str, source: str) -> str:
    """``extra`` for extraPaths, ``daily`` for a dated log, ``curated`` for MEMORY.md and other memory notes."""
    if source == "extra":
        return "extra"
    if path not in ROOT_FILES and log_date(path) is not None:
        return "daily"
    return "curated"


# -- trimming (pure) -------------------------------------------------------------------------------------------
class _File:
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


def line_terms(line: str, terms: Sequence[str]) -> set[str]:
    """The query terms ``line`` holds: words by a shared stem-like prefix of up to five letters, as keyword
    search attributes matches (``search._same_stem``), CJK terms as substrings. Case and accents are folded
    as FTS5 folds them."""
    lower = line.lower()
    plain = CJK_RUN.sub(" ", lower) if not lower.isascii() else lower
    words = {w if w.isascii() else _fold(w) for w in _WORD.findall(plain)}
    prefixes = {w[:5] for w in words if len(w) >= 5}
    held = set()
    for term in terms:
        t = term.lower() if term.isascii() else _fold(term)
        if CJK_RUN.fullmatch(t):
            found = t in lower or t in _fold(line)
        elif t in words:
            found = True
        elif len(t) < 3:
            found = False
        elif len(t) >= 5:  # some word shares min(len(word), len(term), 5) first letters with the term
            found = t[:5] in prefixes or t[:3] in words or t[:4] in words
        else:
            found = any(w.startswith(t) for w in words) or t[:3] in words
        if found:
            held.add(term)
    return held


def term_weights(line_sets: Sequence[set[str]]) -> dict[str, float]:
    """IDF of each term over the candidates' lines: rare terms locate the evidence, common ones do not."""
    n = max(1, len(line_sets))
    df: dict[str, int] = {}
    for held in line_sets:
        for t in held:
            df[t] = df.get(t, 0) + 1
    return {t: math.log(1 + n / d) for t, d in df.items()}


def focus_range(
    f: _File,
    start: int,
    end: int,
    keyword: Mapping[int, float],
    windows: Sequence[Window],
    weights: tuple[float, float],
    context: int = 1,
) -> tuple[int, int]:
    """The lines of chunk ``start..end`` worth keeping: the best line and ``context`` content lines each side,
    plus the section's heading line when only blank lines separate it from them."""
    content = [n for n in range(start, end + 1) if f.is_content(n)]
    if not content:
        return start, end
    lo, hi = content[0], content[-1]
    if len(content) > 2 * context + 1:
        wv, wt = weights
        scores = {}
        for n in content:
            vec = max((w.similarity for w in windows if w.first <= n <= w.last), default=0.0)
            scores[n] = wv * vec + wt * keyword.get(n, 0.0)
        best = max(content, key=lambda n: (scores[n], -n))
        if scores[best] > min(scores.values()):  # else no line-level signal: the chunk stays whole
            lo = hi = best
            for step in (-1, 1):
                n, taken = best + step, 0
                while taken < context and 1 <= n <= len(f.lines) and not f.is_heading(n):
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


# -- selection (pure) -------------------------------------------------------------------------------------------
def build_pack(
    hits: Sequence[Hit],
    *,
    query: str,
    terms: Sequence[str],
    mode: str,
    lines_of: LinesOf,
    budget_tokens: int,
    windows: Mapping[int, Sequence[Window]] | None = None,
    count: TokenCounter = estimate_tokens,
    min_score: float = 0.0,
    max_items: int | None = None,
    weights: tuple[float, float] = (0.7, 0.3),
    context: int = 1,
) -> Pack:
    """Pack ``hits`` (in ranking order) into at most ``budget_tokens`` tokens; see the module docstring.

    ``terms`` are the query's keyword terms (``SearchOutcome.terms``), ``windows`` the window vectors of
    each candidate chunk by chunk id (empty in keyword mode), ``weights`` the (vector, keyword) weights of a
    line's score, ``count`` the token counter.
    """
    windows = windows or {}
    if mode == "keyword":
        weights = (0.0, 1.0)
    elif mode == "vector":
        weights = (1.0, 0.001)  # keywords only break ties between lines of one window
    all_terms = query_terms(query)
    files: dict[str, _File | None] = {}
    receipts: list[Receipt | None] = [None] * len(hits)
    # 1. candidates: threshold, file check, trimming
    staged: list[tuple[int, Hit, _File, int, int]] = []
    for rank, hit in enumerate(hits):
        c = hit.chunk
        if mode != "keyword" and hit.score < min_score and not contains_all_terms(c.text, all_terms, query):
            receipts[rank] = _receipt(rank, hit, cite(c.path, c.start_line, c.end_line), "excluded", "below_min_score")
            continue
        if c.path not in files:
            lines = lines_of(c.path)
            files[c.path] = _File(lines) if lines is not None else None
        f = files[c.path]
        if f is None or c.text not in f.text(c.start_line, c.end_line):
            receipts[rank] = _receipt(rank, hit, cite(c.path, c.start_line, c.end_line), "excluded", "stale")
            continue
        staged.append((rank, hit, f, c.start_line, c.end_line))
    line_sets = {
        (h.chunk.path, n): line_terms(f.lines[n - 1], terms)
        for _, h, f, s, e in staged
        for n in range(s, e + 1)
        if f.is_content(n)
    }
    idf = term_weights(list(line_sets.values()))
    total = sum(idf.values())
    # 2. greedy selection under the budget, then the exact count of the whole bundle
    sel = _Selection(count, budget_tokens, max_items, header=bool(staged))
    for rank, hit, f, s, e in staged:
        c = hit.chunk
        kw = {
            n: sum(idf.get(t, 0.0) for t in line_sets[(c.path, n)]) / total if total else 0.0
            for n in range(s, e + 1)
            if (c.path, n) in line_sets
        }
        lo, hi = focus_range(f, s, e, kw, windows.get(c.id or -1, ()), weights, context)
        receipts[rank] = sel.consider(rank, hit, f, lo, hi)
    sel.fit(receipts)
    return Pack(query, budget_tokens, sel.used, sel.items(), sel.bundle, mode, sel.resolve(receipts))


@dataclass
class _Slot:
    """An included item; ``words`` for near-duplicate checks, ``cost`` in tokens with its separator."""

    item: PackItem
    words: set[str]
    cost: int


class _Selection:
    """Greedy selection state: included items (``None`` once merged into another), what each merge or
    addition changed (to undo the last ones if the exact count of the bundle is over), tokens used."""

    def __init__(self, count: TokenCounter, budget: int, max_items: int | None, header: bool) -> None:
        self.count, self.budget, self.max_items = count, budget, max_items
        self.base = count("")
        self.slots: list[_Slot | None] = []
        self.alias: dict[int, int] = {}  # merged-away slot -> the slot holding its lines
        self.events: list[tuple[int, list[tuple[int, _Slot | None]], int]] = []  # (rank, old slots, old length)
        self.used = count(HEADER) - self.base if header else 0
        self.bundle = ""

    def _cost(self, item: PackItem) -> int:
        return self.count(item.block() + SEPARATOR) - self.base

    def consider(self, rank: int, hit: Hit, f: _File, lo: int, hi: int) -> Receipt:
        """Include, merge or exclude one trimmed candidate; its receipt (reasons name slots as ``#i``)."""
        c = hit.chunk
        item = _item(c.path, c.source, f, lo, hi, hit.score)
        ref = item.ref
        words = set(_WORD.findall(_fold(item.text)))
        live = [(i, sl) for i, sl in enumerate(self.slots) if sl is not None]
        touching = [i for i, sl in live if sl.item.path == c.path and _touches(sl.item, lo, hi)]
        if touching:
            first = self.slots[touching[0]]
            assert first is not None
            if first.item.start_line <= lo and hi <= first.item.end_line:
                return _receipt(rank, hit, ref, "excluded", f"duplicate_of #{touching[0]}")
            olds = [(i, self.slots[i]) for i in touching]
            start = min([lo] + [sl.item.start_line for _, sl in olds if sl])
            end = max([hi] + [sl.item.end_line for _, sl in olds if sl])
            score = max([hit.score] + [sl.item.score for _, sl in olds if sl])
            grown = _item(c.path, c.source, f, start, end, score)
            cost = self._cost(grown)
            extra = cost - sum(sl.cost for _, sl in olds if sl)
            if self.used + extra > self.budget:
                return _receipt(rank, hit, ref, "excluded", "over_budget", extra)
            self.events.append((rank, olds, len(self.slots)))
            merged_words = words.union(*(sl.words for _, sl in olds if sl))
            self.slots[touching[0]] = _Slot(grown, merged_words, cost)
            for i in touching[1:]:
                self.slots[i] = None
                self.alias[i] = touching[0]
            self.used += extra
            return _receipt(rank, hit, ref, "included", f"merged_into #{touching[0]}", extra)
        twin = next((i for i, sl in live if _jaccard(words, sl.words) >= NEAR_DUPLICATE), None)
        if twin is not None:
            return _receipt(rank, hit, ref, "excluded", f"duplicate_of #{twin}")
        if self.max_items is not None and len(live) >= self.max_items:
            return _receipt(rank, hit, ref, "excluded", "max_items")
        cost = self._cost(item)
        if self.used + cost > self.budget:
            return _receipt(rank, hit, ref, "excluded", "over_budget", cost)
        self.events.append((rank, [], len(self.slots)))
        self.slots.append(_Slot(item, words, cost))
        self.used += cost
        return _receipt(rank, hit, ref, "included", "selected", cost)

    def items(self) -> list[PackItem]:
        return [sl.item for sl in self.slots if sl is not None]

    def fit(self, receipts: list[Receipt | None]) -> None:
        """Count the whole bundle; while it is over the budget, undo the last addition or merge."""
        while True:
            self.bundle = _render(self.items())
            self.used = self.count(self.bundle) - self.base if self.bundle else 0
            if self.used <= self.budget or not self.events:
                return
            rank, olds, length = self.events.pop()
            del self.slots[length:]
            for i, old in olds:
                self.slots[i] = old
                self.alias.pop(i, None)
            undone = receipts[rank]
            assert undone is not None
            receipts[rank] = replace(undone, decision="excluded", reason="over_budget")

    def resolve(self, receipts: list[Receipt | None]) -> list[Receipt]:
        """Receipts with ``#i`` replaced by the final ref of the item that holds slot ``i``'s lines."""
        out = []
        for r in receipts:
            assert r is not None
            kind, _, target = r.reason.partition(" #")
            if target:
                i = int(target)
                while i in self.alias:
                    i = self.alias[i]
                slot = self.slots[i] if i < len(self.slots) else None
                r = replace(r, reason=f"{kind} {slot.item.ref}") if slot else replace(r, reason="over_budget")
            out.append(r)
        return out


def _item(path: str, source: str, f: _File, lo: int, hi: int, score: float) -> PackItem:
    head = None if f.is_heading(lo) else f.heading_above(lo)
    when = log_date(path)
    return PackItem(
        path,
        lo,
        hi,
        f.text(lo, hi),
        float(score),
        source,
        kind_of(path, source),
        when.isoformat() if when else None,
        f.lines[head - 1] if head is not None else None,
        head,
    )


def _touches(item: PackItem, lo: int, hi: int) -> bool:
    return lo <= item.end_line + 1 and hi >= item.start_line - 1


def _jaccard(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _render(items: Sequence[PackItem]) -> str:
    if not items:
        return ""
    return HEADER + SEPARATOR + SEPARATOR.join(i.block() for i in items)


def _receipt(rank: int, hit: Hit, ref: str, decision: str, reason: str, tokens: int | None = None) -> Receipt:
    return Receipt(rank + 1, ref, hit.vector_score, hit.text_score, hit.score, decision, reason, tokens)
