"""ContextPack: search candidates in; trimmed, merged, budgeted items with citations and receipts out.

Pure given a search outcome and file reads (``lines_of``). Rules (also in the README, "Context packs"):

- Candidates come in the search's ranking order. Below ``minScore`` a candidate is excluded
  (``below_min_score``) unless it holds every query term, the rule ``memory_search`` applies; in keyword
  mode no threshold applies.
- **Trimming** (mdmem.pack.trim). A candidate chunk is cut to its focus: the ``FOCUS_LINES`` (2) adjacent
  content lines whose scores add up best (a line's score fuses the similarity of the best stored window
  vector covering it with the IDF-weighted share of the query's terms it holds), plus ``CONTEXT_LINES`` (1)
  content line on each side. A chunk with no line-level signal, or too few lines to trim, stays whole.
  The text of an item is exactly lines ``startLine..endLine`` of the file, except that secrets are
  replaced by ``[REDACTED:<kind>]`` (mdmem.util.redaction; the files and the index keep them), and that a
  session day file's retained turns show without their ids, markers and escapes (mdmem.files.sessionview).
  When the section's heading line (the nearest Markdown heading above) is outside the range it is kept
  beside the item (``heading``, ``headingLine``) and printed above it in the bundle (never a retained
  turn's heading: it holds the entry id).
- **Selection.** Greedy in ranking order under ``budget_tokens``: a candidate whose range overlaps or
  touches an included item of the same file is merged into it (``merged_into``) or, when inside it
  already, dropped (``duplicate_of``); one whose words are nearly those of an included item (the same
  note in another file) is dropped (``duplicate_of``); then ``max_items`` and the budget
  (``over_budget``; a smaller candidate further down may still fit). A candidate over the budget is tried
  again narrower: its focus without context lines, then its best line alone (with its heading). After the
  first ``WIDEN_TOP`` (2) candidates, the items they made grow to their whole chunks while that fits, before
  deeper candidates are considered: the top of the ranking is where evidence most often is, and a trimmed
  item can miss it.
- **Budget.** Costs are counted with ``count`` (the provider's tokenizer, or the estimate); the whole
  bundle is counted again at the end and the last additions are undone until it fits, so
  ``usedTokens <= budgetTokens`` always holds.
- **Receipts.** One per candidate, in ranking order: ref, scores, decision and reason; never any text.
- **An empty pack says why**: ``matched`` counts the candidates that passed the threshold and are still in
  their files (0: nothing matched); when the best of them is left out for the budget, ``best_left_out`` has
  its narrowest ref and the smallest budget that packs it. A budget below ``min_budget`` (the header's cost
  plus one) cannot hold anything; ``mdmem.packer`` refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from mdmem.files.sessionview import inside_block, is_day_file, prompt_text
from mdmem.pack.items import BestMatch, Pack, PackItem, Receipt, cite, kind_of
from mdmem.pack.trim import FileLines, TermMatcher, Window, focus_range, term_weights
from mdmem.search.hybrid import Hit
from mdmem.search.query import WORD, contains_all_terms, fold, query_terms
from mdmem.search.scoring import log_date, low_confidence_picks
from mdmem.util.redaction import redact
from mdmem.util.tokens import TokenCounter, estimate_tokens

HEADER = "Memory excerpts, most relevant first; each ends with its Source (path#lines): cite it when you use it."
SEPARATOR = "\n\n"
NEAR_DUPLICATE = 0.8  # word-set Jaccard at or above which two items say the same thing
# Chosen on the LoCoMo tune split (README, "Context packs"): pack recall at 500 / 1,000 / 2,000 tokens.
FOCUS_LINES = 2
CONTEXT_LINES = 1
WIDEN_TOP = 2

LinesOf = Callable[[str], "list[str] | None"]
"""A file's lines (``\\n``-split, ``\\r\\n`` normalised) by workspace-relative path; None when unreadable."""


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
    span: int = FOCUS_LINES,
    context: tuple[int, int] = (CONTEXT_LINES, CONTEXT_LINES),
    widen_after: int | None = WIDEN_TOP,
    price_by_line: bool = False,
    low_confidence: int = 0,
    explain: bool = True,
) -> Pack:
    """Pack ``hits`` (in ranking order) into at most ``budget_tokens`` tokens; see the module docstring.

    ``terms`` are the query's keyword terms (``SearchOutcome.terms``), ``windows`` the window vectors of
    each candidate chunk by chunk id (empty in keyword mode), ``weights`` the (vector, keyword) weights of a
    line's score, ``count`` the token counter; ``span``, ``context`` and ``widen_after`` (None: never widen)
    as the module docstring says. ``price_by_line`` prices items as the sum of their lines (for a caching
    model tokenizer; additive tokenizers such as WordPiece give the same figure). When no candidate passes
    ``min_score``, up to ``low_confidence`` of the closest are packed anyway, their items ``low_confidence``.
    Without ``explain`` (no trace asked), a candidate that can only be excluded because ``max_items`` are
    in already is not compared with them, and its receipt says ``max_items`` even where it also repeats one.
    """
    windows = windows or {}
    if mode == "keyword":
        weights = (0.0, 1.0)
    elif mode == "vector":
        weights = (1.0, 0.001)  # keywords only break ties between lines of one window
    all_terms = query_terms(query)
    files: dict[str, FileLines | None] = {}
    receipts: list[Receipt | None] = [None] * len(hits)
    # 1. candidates: threshold, file check, trimming
    staged: list[tuple[int, Hit, FileLines, int, int]] = []
    kept = [
        mode == "keyword"
        or h.score >= min_score
        or h.vector_score is None  # no vector yet (embedding pending): found by keywords, never hidden
        or contains_all_terms(h.chunk.text, all_terms, query)
        for h in hits
    ]
    low: set[int] = set()
    if hits and not any(kept) and low_confidence:  # as memory_search: the closest few, marked
        low = set(low_confidence_picks({rank: h.score for rank, h in enumerate(hits)}, low_confidence))
    for rank, hit in enumerate(hits):
        c = hit.chunk
        if not kept[rank] and rank not in low:
            receipts[rank] = _receipt(rank, hit, cite(c.path, c.start_line, c.end_line), "excluded", "below_min_score")
            continue
        if c.path not in files:
            lines = lines_of(c.path)
            files[c.path] = FileLines.of(lines) if lines is not None else None
        f = files[c.path]
        if f is None or c.text not in f.text(c.start_line, c.end_line):
            receipts[rank] = _receipt(rank, hit, cite(c.path, c.start_line, c.end_line), "excluded", "stale")
            continue
        staged.append((rank, hit, f, c.start_line, c.end_line))
    matcher = TermMatcher(terms)
    line_sets = {
        (h.chunk.path, n): matcher.held(f.lines[n - 1])
        for _, h, f, s, e in staged
        for n in range(s, e + 1)
        if f.is_content(n)
    }
    idf = term_weights(list(line_sets.values()))
    total = sum(idf.values())
    # 2. greedy selection under the budget, then the exact count of the whole bundle
    sel = _Selection(count, budget_tokens, max_items, header=bool(staged), by_line=price_by_line, explain=explain)
    narrowest: tuple[int, int] | None = None  # the best match's smallest range, to say what budget it needs
    for i, (rank, hit, f, s, e) in enumerate(staged):
        if i == widen_after:
            _widen(sel, staged[:i], receipts)
        c = hit.chunk
        kw = {
            n: sum(idf.get(t, 0.0) for t in line_sets[(c.path, n)]) / total if total else 0.0
            for n in range(s, e + 1)
            if (c.path, n) in line_sets
        }
        ranges = _ranges(f, s, e, kw, windows.get(c.id or -1, ()), weights, span, context)
        for lo, hi in ranges:  # the focus with its context; when that is over the budget, narrower ones
            receipt = sel.consider(rank, hit, f, lo, hi, low=rank in low)
            if receipt.reason != "over_budget":
                break
        receipts[rank] = receipt
        if i == 0:
            narrowest = ranges[-1]
    if widen_after is not None and len(staged) <= widen_after:
        _widen(sel, staged, receipts)
    sel.fit(receipts)
    best = None
    if staged and narrowest is not None and _over_budget(receipts[staged[0][0]]):
        _, hit, f, _, _ = staged[0]
        item = _item(hit.chunk.path, hit.chunk.source, f, *narrowest, hit.score, staged[0][0] in low)
        best = BestMatch(item.ref, sel.alone(item))
    receipt_list = sel.resolve(receipts)
    return Pack(query, budget_tokens, sel.used, sel.items(), sel.bundle, mode, receipt_list, len(staged), best)


def min_budget(count: TokenCounter = estimate_tokens) -> int:
    """The smallest budget a pack can use: its header (and the separator after it) costs one token less."""
    return count(HEADER + SEPARATOR) - count("") + 1


def _ranges(
    f: FileLines,
    s: int,
    e: int,
    kw: Mapping[int, float],
    windows: Sequence[Window],
    weights: tuple[float, float],
    span: int,
    context: tuple[int, int],
) -> list[tuple[int, int]]:
    """The ranges to try for chunk ``s..e``, widest first: the focus and its context, the focus alone, its best
    line alone; each is found inside the one before (a range without line-level signal is not cut further)."""
    out = [focus_range(f, s, e, kw, windows, weights, span, context)]
    for size in (span, 1):
        lo, hi = focus_range(f, *out[-1], kw, windows, weights, size, (0, 0))
        if (lo, hi) != out[-1]:
            out.append((lo, hi))
    return out


def _over_budget(receipt: Receipt | None) -> bool:
    return receipt is not None and receipt.decision == "excluded" and receipt.reason == "over_budget"


@dataclass
class _Slot:
    """An included item; ``words`` for near-duplicate checks, ``cost`` in tokens with its separator."""

    item: PackItem
    words: set[str]
    cost: int


class _Selection:
    """Greedy selection state: included items (``None`` once merged into another), what each merge or
    addition changed (to undo the last ones if the exact count of the bundle is over), tokens used."""

    def __init__(
        self, count: TokenCounter, budget: int, max_items: int | None, header: bool, by_line: bool, explain: bool
    ) -> None:
        self.count, self.budget, self.max_items, self.by_line = count, budget, max_items, by_line
        self.explain = explain
        self.base = count("")
        self._newline: int | None = None
        self.slots: list[_Slot | None] = []
        self.alias: dict[int, int] = {}  # merged-away slot -> the slot holding its lines
        # (rank, old slots, old length, the receipt before a widening): what undoing a step restores
        self.events: list[tuple[int, list[tuple[int, _Slot | None]], int, Receipt | None]] = []
        self.header = count(HEADER) - self.base
        self.used = self.header if header else 0
        self.bundle = ""

    def _cost(self, item: PackItem) -> int:
        """An item's tokens, separator included; with ``by_line``, the sum of its lines' (lines recur across
        candidates and queries, so a caching tokenizer prices each once); ``fit`` counts the bundle exactly."""
        if not self.by_line:
            return self.count(item.block() + SEPARATOR) - self.base
        pieces = (item.block() + SEPARATOR).split("\n")
        newline = self._newline if self._newline is not None else self.count("\n") - self.base
        self._newline = newline
        return sum(self.count(p) - self.base for p in pieces if p) + newline * (len(pieces) - 1)

    def alone(self, item: PackItem) -> int:
        """The smallest budget that takes ``item`` into an empty pack: the selection's price for it and the
        exact count of the bundle it makes both fit there."""
        return max(self.header + self._cost(item), self.count(_render([item])) - self.base)

    def consider(self, rank: int, hit: Hit, f: FileLines, lo: int, hi: int, low: bool = False) -> Receipt:
        """Include, merge or exclude one trimmed candidate; its receipt (reasons name slots as ``#i``)."""
        c = hit.chunk
        ref = cite(c.path, lo, hi)
        live = [(i, sl) for i, sl in enumerate(self.slots) if sl is not None]
        touching = [i for i, sl in live if sl.item.path == c.path and _touches(sl.item, lo, hi)]
        full = self.max_items is not None and len(live) >= self.max_items
        if full and not touching and not self.explain:
            return _receipt(rank, hit, ref, "excluded", "max_items")
        item = _item(c.path, c.source, f, lo, hi, hit.score, low)
        words = set(WORD.findall(fold(item.text)))
        if touching:
            first = self.slots[touching[0]]
            assert first is not None
            if first.item.start_line <= lo and hi <= first.item.end_line:
                return _receipt(rank, hit, ref, "excluded", f"duplicate_of #{touching[0]}")
            olds = [(i, self.slots[i]) for i in touching]
            start = min([lo] + [sl.item.start_line for _, sl in olds if sl])
            end = max([hi] + [sl.item.end_line for _, sl in olds if sl])
            score = max([hit.score] + [sl.item.score for _, sl in olds if sl])
            low = low and all(sl.item.low_confidence for _, sl in olds if sl)
            grown = _item(c.path, c.source, f, start, end, score, low)
            cost = self._cost(grown)
            extra = cost - sum(sl.cost for _, sl in olds if sl)
            if self.used + extra > self.budget:
                return _receipt(rank, hit, ref, "excluded", "over_budget", extra)
            self.events.append((rank, olds, len(self.slots), None))
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
        if full:
            return _receipt(rank, hit, ref, "excluded", "max_items")
        cost = self._cost(item)
        if self.used + cost > self.budget:
            return _receipt(rank, hit, ref, "excluded", "over_budget", cost)
        self.events.append((rank, [], len(self.slots), None))
        self.slots.append(_Slot(item, words, cost))
        self.used += cost
        return _receipt(rank, hit, ref, "included", "selected", cost)

    def widen(self, rank: int, hit: Hit, f: FileLines, lo: int, hi: int, receipt: Receipt) -> Receipt:
        """Grow the item holding an included candidate to ``lo..hi`` if that fits; its updated receipt."""
        c = hit.chunk
        touching = [i for i, sl in enumerate(self.slots) if sl and sl.item.path == c.path and _touches(sl.item, lo, hi)]
        first = self.slots[touching[0]] if touching else None
        if first is None or (first.item.start_line <= lo and hi <= first.item.end_line):
            return receipt
        olds = [(i, self.slots[i]) for i in touching]
        start = min([lo] + [sl.item.start_line for _, sl in olds if sl])
        end = max([hi] + [sl.item.end_line for _, sl in olds if sl])
        score = max(sl.item.score for _, sl in olds if sl)
        grown = _item(c.path, c.source, f, start, end, score, all(sl.item.low_confidence for _, sl in olds if sl))
        cost = self._cost(grown)
        extra = cost - sum(sl.cost for _, sl in olds if sl)
        if self.used + extra > self.budget:
            return receipt
        self.events.append((rank, olds, len(self.slots), receipt))
        self.slots[touching[0]] = _Slot(grown, first.words.union(*(sl.words for _, sl in olds if sl)), cost)
        for i in touching[1:]:
            self.slots[i] = None
            self.alias[i] = touching[0]
        self.used += extra
        return replace(receipt, ref=cite(c.path, lo, hi), tokens=(receipt.tokens or 0) + extra)

    def items(self) -> list[PackItem]:
        return [sl.item for sl in self.slots if sl is not None]

    def fit(self, receipts: list[Receipt | None]) -> None:
        """Count the whole bundle; while it is over the budget, undo the last addition or merge."""
        while True:
            self.bundle = _render(self.items())
            self.used = self.count(self.bundle) - self.base if self.bundle else 0
            if self.used <= self.budget or not self.events:
                return
            rank, olds, length, before = self.events.pop()
            del self.slots[length:]
            for i, old in olds:
                self.slots[i] = old
                self.alias.pop(i, None)
            undone = receipts[rank]
            assert undone is not None
            receipts[rank] = before or replace(undone, decision="excluded", reason="over_budget")

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


def _widen(
    sel: _Selection, staged: Sequence[tuple[int, Hit, FileLines, int, int]], receipts: list[Receipt | None]
) -> None:
    """Grow the included items of ``staged`` to their whole chunks, in ranking order, while they fit."""
    for rank, hit, f, s, e in staged:
        receipt = receipts[rank]
        if receipt is not None and receipt.decision == "included":
            lo, hi = focus_range(f, s, e, {}, (), (1.0, 0.0), span=e - s + 1, context=(0, 0))
            receipts[rank] = sel.widen(rank, hit, f, lo, hi, receipt)


def _item(path: str, source: str, f: FileLines, lo: int, hi: int, score: float, low: bool = False) -> PackItem:
    head = None if f.is_heading(lo) else f.heading_above(lo)
    when = log_date(path)
    text = f.redacted_text(lo, hi)
    if is_day_file(path, source):  # retained turns without their ids and markers (mdmem.files.sessionview)
        inside = inside_block((f.lines[n] for n in range(lo - 1, len(f.lines))), whole=True)
        text, head = prompt_text(text.split("\n"), inside), None
    return PackItem(
        path,
        lo,
        hi,
        text,
        float(score),
        source,
        kind_of(path, source),
        when.isoformat() if when else None,
        redact(f.lines[head - 1]) if head is not None else None,
        head,
        low,
    )


def _touches(item: PackItem, lo: int, hi: int) -> bool:
    return lo <= item.end_line + 1 and hi >= item.start_line - 1


def _jaccard(a: set[str], b: set[str]) -> float:
    common = len(a & b)
    union = len(a) + len(b) - common
    return common / union if union else 0.0


def _render(items: Sequence[PackItem]) -> str:
    if not items:
        return ""
    return HEADER + SEPARATOR + SEPARATOR.join(i.block() for i in items)


def _receipt(rank: int, hit: Hit, ref: str, decision: str, reason: str, tokens: int | None = None) -> Receipt:
    return Receipt(rank + 1, ref, hit.vector_score, hit.text_score, hit.score, decision, reason, tokens)
