"""What a ContextPack is made of: its items (cited line ranges of memory files), the receipts saying why each
candidate is in or out, and the pack itself, with their JSON shapes (see mdmem.pack.build for how one is built)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mdmem.files.workspace import ROOT_FILES
from mdmem.search.results import cite
from mdmem.search.scoring import log_date
from mdmem.util.redaction import redact_path


@dataclass(frozen=True)
class PackItem:
    path: str
    start_line: int
    end_line: int
    text: str
    score: float
    source: str
    kind: str  # "curated", "daily", "extra" or "session"
    date: str | None = None
    heading: str | None = None  # the section's heading line when it is outside start_line..end_line
    heading_line: int | None = None
    low_confidence: bool = False  # packed only because no candidate reached minScore

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
            "path": redact_path(self.path),
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
        if self.low_confidence:
            out["lowConfidence"] = True
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
class BestMatch:
    """The best match, left out for the budget: its smallest cited range and the budget that would hold it
    (the pack's header included)."""

    ref: str
    budget_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "budgetTokens": self.budget_tokens}


@dataclass(frozen=True)
class Pack:
    query: str
    budget_tokens: int
    used_tokens: int
    items: list[PackItem]
    bundle_text: str
    mode: str
    receipts: list[Receipt] = field(default_factory=list)
    matched: int = 0  # candidates that passed minScore and are still in their files: 0 means nothing matched
    best_left_out: BestMatch | None = None  # the best of them, when the budget could not hold it

    def to_dict(self, trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "budgetTokens": self.budget_tokens,
            "usedTokens": self.used_tokens,
            "items": [i.to_dict() for i in self.items],
            "bundleText": self.bundle_text,
            "mode": self.mode,
            "matched": self.matched,
        }
        if self.best_left_out is not None:
            out["bestLeftOut"] = self.best_left_out.to_dict()
        if trace:
            out["trace"] = [r.to_dict() for r in self.receipts]
        return out


def kind_of(path: str, source: str) -> str:
    """``extra`` for extraPaths, ``session`` for sessions/ (retained turns, transcripts), ``daily`` for a dated
    log, ``curated`` for MEMORY.md and other memory notes."""
    if source == "extra":
        return "extra"
    if source == "sessions":
        return "session"
    if path not in ROOT_FILES and log_date(path) is not None:
        return "daily"
    return "curated"
