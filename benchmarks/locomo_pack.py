"""Pack recall on LoCoMo (used by ``benchmarks/locomo.py --pack``): how much of a question's evidence a
ContextPack holds at a token budget, next to filling the same budget with whole top-ranked chunks.

- pack recall@B = share of the question's evidence lines inside the items of ``Memory.pack(question,
  budget_tokens=B)`` (the configured minScore and everything else as shipped);
- whole-chunk baseline@B = the same share for the candidates ``memory_search`` ranks for the same net
  (same minScore), taken whole in rank order while they fit in B tokens, printed as the pack prints
  them (header, text, ``Source:`` line), counted with the same tokenizer;
- ``r5Tokens`` = what the top-5 whole chunks of the plain search (the R@5 column) cost in tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from mdmem.engine.packing import candidate_count
from mdmem.memory import Memory
from mdmem.pack.build import HEADER, SEPARATOR
from mdmem.pack.items import cite
from mdmem.util.tokens import TokenCounter, estimate_tokens

BUDGETS = (500, 1000, 2000)
Line = tuple[str, int]
Range = tuple[str, int, int]


def recall(ranges: Sequence[Range], gold: frozenset[Line]) -> float:
    """Share of ``gold`` lines inside any of ``ranges``."""
    return sum(any(p == g[0] and s <= g[1] <= e for p, s, e in ranges) for g in gold) / len(gold)


def whole_chunk_fill(
    ranked: Sequence[Range], text_of: Callable[[Range], str], count: TokenCounter, budget: int
) -> list[Range]:
    """Whole chunks in rank order while the bundle they make fits in ``budget`` tokens (as the pack counts)."""
    base = count("")
    used = count(HEADER) - base
    kept: list[Range] = []
    for r in ranked:
        cost = count(f"{text_of(r)}\nSource: {cite(*r)}{SEPARATOR}") - base
        if used + cost <= budget:
            kept.append(r)
            used += cost
    return kept


class PackRecall:
    """Per-question pack figures for one open Memory (workspace files read once)."""

    def __init__(self, mem: Memory, workspace: Path, budgets: Sequence[int] = BUDGETS) -> None:
        self.mem = mem
        self.budgets = budgets
        self.workspace = workspace
        self._lines: dict[str, list[str]] = {}
        provider = mem.choice.provider
        self.count: TokenCounter = provider.count_tokens if provider is not None else estimate_tokens

    def text_of(self, r: Range) -> str:
        path, start, end = r
        if path not in self._lines:
            self._lines[path] = (self.workspace / path).read_text(encoding="utf-8").split("\n")
        return "\n".join(self._lines[path][start - 1 : end])

    def top_tokens(self, ranges: Sequence[Range]) -> int:
        base = self.count("")
        return sum(self.count(self.text_of(r)) - base for r in ranges)

    def scores(self, question: str, gold: frozenset[Line]) -> dict[str, float]:
        out: dict[str, float] = {}
        max_results = self.mem.settings.query.max_results
        for budget in self.budgets:
            packed = self.mem.pack(question, budget_tokens=budget)
            items = [(i["path"], i["startLine"], i["endLine"]) for i in packed["items"]]
            out[f"pack@{budget}"] = recall(items, gold)
            out[f"packTokens@{budget}"] = packed["usedTokens"]
            out[f"packItems@{budget}"] = len(items)
            found = self.mem.search(question, max_results=candidate_count(max_results, budget))
            ranked = [(r["path"], r["startLine"], r["endLine"]) for r in found["results"]]
            out[f"whole@{budget}"] = recall(whole_chunk_fill(ranked, self.text_of, self.count, budget), gold)
        return out


PACK_COLUMNS = tuple(f"{kind}@{b}" for b in BUDGETS for kind in ("pack", "whole"))


def pack_table(title: str, groups: dict[str, dict[str, float]], order: Sequence[str]) -> str:
    """Rows per category: pack and whole-chunk recall at each budget, mean pack tokens, R@5 and its tokens."""
    head = f"{'':12} {'n':>4}  " + " ".join(f"{c:>10}" for c in PACK_COLUMNS) + f" {'R@5':>6} {'R@5 tok':>7}"
    out = [title, head]
    for group in order:
        g = groups.get(group)
        if not g:
            continue
        cells = " ".join(f"{g.get(c, float('nan')):10.3f}" for c in PACK_COLUMNS)
        out.append(f"{group:12} {int(g['n']):>4}  {cells} {g['r@5']:6.3f} {g.get('r5Tokens', 0):7.0f}")
    used = "  ".join(f"{b}: {groups['overall'][f'packTokens@{b}']:.0f} tokens" for b in BUDGETS if "overall" in groups)
    items = "  ".join(f"{b}: {groups['overall'][f'packItems@{b}']:.1f}" for b in BUDGETS if "overall" in groups)
    return "\n".join([*out, f"mean pack size (overall)  {used}", f"mean items per pack       {items}"])
