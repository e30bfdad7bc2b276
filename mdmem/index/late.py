"""Late chunking (``chunking.windowVectors: "late"``): window vectors pooled from one pass over the chunk.

With ``"separate"`` windows, each of a chunk's windows is embedded as its own input (its heading path, then
its lines). With ``"late"`` the chunk is decoded once, with pooling off, and each window's vector is the mean
of the token vectors of its span, normalised (Günther et al., "Late Chunking", 2024): one model pass per
chunk instead of one per window, and each window's tokens have seen the whole chunk.

A window's span is the tokens of its lines plus those of the headings in force at its first line (the
chunk's heading path, decoded first, and headings inside the chunk): what a separate window embeds, each
token now seen in context. A chunk whose tokens may not fit the model's context keeps separate windows.

A late window's input hash covers the whole chunk input and the window's place in it, so a vector is only
reused (cache, index) for the same window of the same chunk text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mdmem.config.settings import ChunkingConfig
from mdmem.util.tokens import TokenCounter

if TYPE_CHECKING:  # the search and pack paths import this module: only the vector path needs these
    import numpy as np

    from mdmem.index.chunker import Chunk
    from mdmem.providers.base import EmbeddingProvider
    from mdmem.providers.token_vectors import TokenVectors
    from mdmem.store import ChunkRow

_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class LateWindow:
    """One window of a late-chunked chunk: its separate-mode text (for the fallback), file lines, and the
    pieces whose tokens it pools (its lines and the headings in force)."""

    text: str
    first: int
    last: int
    pieces: tuple[int, ...]


@dataclass(frozen=True)
class LatePlan:
    """A chunk decoded once: its pieces (heading path line, then one piece per line) and its windows."""

    pieces: tuple[str, ...]
    windows: tuple[LateWindow, ...]
    keys: tuple[str, ...]  # each window's input hash


def late_identity(chunking: ChunkingConfig, provider: EmbeddingProvider | None) -> dict[str, str | None]:
    """The index identity's part for window vectors: ``{"windowVectors": "late"}`` when windows are late-chunked
    (so a switch rebuilds the index), nothing otherwise: ``separate``, no windows, or a provider without
    per-token embeddings, whose vectors are the same either way (and indexes built before the option keep
    their identity). ``{"windowVectors": None}`` while the provider cannot tell yet (a remote server not
    asked yet, or down): the index's own value stands (``Indexer.identity_matches``)."""
    late = chunking.window_vectors == "late" and chunking.window_tokens > 0
    if not late or provider is None or provider.token_embeddings is False:
        return {}
    return {"windowVectors": "late" if provider.token_embeddings else None}


def settle_late(current: dict[str, Any], stored: dict[str, Any] | None) -> dict[str, Any]:
    """``current`` (an index identity) with a ``windowVectors`` not known yet replaced by ``stored``'s value,
    or dropped: until the provider can tell, the index's own value stands (a rebuild needs a real change)."""
    if current.get("windowVectors", "") is not None:
        return current
    out = {k: v for k, v in current.items() if k != "windowVectors"}
    value = (stored or {}).get("windowVectors")
    return out if value is None else {**out, "windowVectors": value}


def late_in_effect(chunking: ChunkingConfig, provider: EmbeddingProvider | None) -> dict[str, str] | None:
    """For status: how window vectors are made now ("late", "separate" or "unknown") and why; None when
    ``windowVectors`` is not "late" (nothing to explain)."""
    if chunking.window_vectors != "late":
        return None
    if not chunking.window_tokens:
        return {"configured": "late", "inEffect": "separate", "why": "windowTokens is 0: one vector per chunk"}
    if provider is None:
        return {"configured": "late", "inEffect": "separate", "why": "no embedding provider"}
    known = provider.token_embeddings
    state = "unknown" if known is None else "late" if known else "separate"
    note = getattr(provider, "token_note", None)
    why = note() if callable(note) else f"{provider.id} {'gives' if known else 'gives no'} per-token embeddings"
    return {"configured": "late", "inEffect": state, "why": why}


def late_setup(provider: EmbeddingProvider, chunking: ChunkingConfig) -> tuple[int, int]:
    """(context, document prefix tokens) for ``late_plan``: (0, 0) when windows are embedded separately,
    by the config or because the provider gives no per-token embeddings."""
    if chunking.window_vectors != "late" or not chunking.window_tokens or provider.token_embeddings is False:
        return 0, 0  # (None: not known yet, a remote server is asked by token_context)
    context = provider.token_context()
    if context <= 0:
        return 0, 0
    prefix = provider.prepare_document("")
    return context, (provider.count_tokens(prefix) - provider.count_tokens("")) if prefix else 0


def late_plan(
    chunk: Chunk | ChunkRow,
    windows: Sequence[tuple[str, int, int]],
    count: TokenCounter,
    context: int,
    prefix_tokens: int = 0,
) -> LatePlan | None:
    """How ``chunk`` is late-chunked, given its separate windows ((text, first line, last line), from
    ``embedding_windows``); None when it has no windows or its tokens may exceed ``context``.

    ``count`` is the model's tokenizer (special tokens included); ``prefix_tokens`` the document prefix's
    tokens. The sequence is built piece by piece (``providers.token_vectors``), so this count is its length.
    """
    if not windows or context <= 0:
        return None
    lines = chunk.text.split("\n")
    pieces: list[str] = []
    heads: list[tuple[int, int]] = []  # (level, piece) of the heading path in force
    if chunk.heading and not chunk.text.lstrip().startswith("#"):  # decoded first, as in a whole chunk's input
        pieces.append(chunk.heading + "\n")
        heads = [(1, 0)]
    first_piece = len(pieces)
    heads_at: dict[int, tuple[int, ...]] = {}  # file line -> heading pieces in force there
    for i, line in enumerate(lines):
        n = chunk.start_line + i
        pieces.append(line + "\n" if i + 1 < len(lines) else line)
        m = _ATX.match(line)
        if m:
            level = len(m.group(1))
            heads = [(lv, p) for lv, p in heads if lv < level or p < first_piece] + [(level, len(pieces) - 1)]
        heads_at[n] = tuple(p for _, p in heads)
    specials = count("")  # counted with every piece; the sequence has them once
    used = specials + prefix_tokens + sum(count(p) - specials for p in pieces)
    if used > context:
        return None
    out: list[LateWindow] = []
    for text, first, last in windows:
        own = range(first - chunk.start_line + first_piece, last - chunk.start_line + first_piece + 1)
        out.append(LateWindow(text, first, last, (*heads_at.get(first, ()), *own)))
    whole = "\x1f".join(pieces)
    keys = tuple(
        _sha256(f"late\x1f{w.first - chunk.start_line}\x1f{w.last - chunk.start_line}\x1f{whole}") for w in out
    )
    return LatePlan(tuple(pieces), tuple(out), keys)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pool_windows(plan: LatePlan, tokens: TokenVectors) -> np.ndarray:
    """Each window's vector: the mean of the token vectors of its pieces, L2-normalised (float32).

    A window whose pieces have no tokens at all (characters the tokenizer drops) gets the chunk's mean."""
    import numpy as np

    vectors, starts = tokens.vectors, tokens.starts
    out = np.empty((len(plan.windows), vectors.shape[1]), dtype=np.float32)
    for row, window in enumerate(plan.windows):
        spans = [vectors[starts[p] : starts[p + 1]] for p in window.pieces]
        picked = np.concatenate(spans) if spans else vectors[:0]
        mean = picked.mean(axis=0) if len(picked) else vectors.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        out[row] = mean / norm if norm > 0 else mean
    return out
