"""Each chunk's ``term_keys`` and ``term_freqs``: a 64-bit key per distinct term it holds (under a GIN index)
and that term's frequency, in the same order. The chunks holding all of a few terms then come from an
intersection of GIN posting lists, and their BM25 from their own rows (``mdmem.store.pg.mostterms``),
rather than from every posting of the terms. A key is of the agent, the generation and the term, so one
agent's lists never hold another's chunks; two terms would share a key once in ~10^19 pairs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def term_key(agent_id: str, gen: int, term: str) -> int:
    """A term's key in a chunk's ``term_keys``: the first 64 bits of the MD5 of agent, generation and term,
    signed (``key_sql`` computes the same in SQL)."""
    digest = hashlib.md5(f"{agent_id}\x1f{gen}\x1f{term}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def key_sql(agent: str, gen: str, term: str) -> str:
    """SQL of ``term_key`` over the columns (or expressions) ``agent``, ``gen`` and ``term``."""
    return f"('x' || left(md5({agent} || chr(31) || {gen}::text || chr(31) || {term}), 16))::bit(64)::int8"


def chunk_terms(agent_id: str, gen: int, freqs: Mapping[str, float]) -> tuple[list[int], list[float]]:
    """A chunk's ``term_keys`` (sorted) and ``term_freqs`` (each key's term's frequency, as BM25 counts it:
    ``keyword.TEXT_WEIGHT`` an occurrence in the text, ``keyword.HEADING_WEIGHT`` in the heading)."""
    pairs = sorted((term_key(agent_id, gen, t), float(f)) for t, f in freqs.items())
    return [k for k, _ in pairs], [f for _, f in pairs]


def keys_of(agent_id: str, gen: int, terms: list[str] | tuple[str, ...]) -> list[int]:
    """The keys of ``terms``, sorted, without repeats (what a chunk holding all of them contains)."""
    return sorted({term_key(agent_id, gen, t) for t in terms})
