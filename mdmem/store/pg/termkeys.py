"""Each chunk's ``term_keys``: a 32-bit key per distinct term it holds, under a GIN index, so the chunks holding
all of a few terms come from an intersection of GIN posting lists (``mdmem.store.pg.mostterms``) rather than
from every posting of the terms. A key is of the agent, the generation and the term, so one agent's lists
never hold another's chunks; two terms sharing a key (a hash collision) only add a candidate, which is then
scored exactly from its postings."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def term_key(agent_id: str, gen: int, term: str) -> int:
    """A term's key in a chunk's ``term_keys``: the first 32 bits of the MD5 of agent, generation and term,
    signed (``key_sql`` computes the same in SQL)."""
    digest = hashlib.md5(f"{agent_id}\x1f{gen}\x1f{term}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


def key_sql(agent: str, gen: str, term: str) -> str:
    """SQL of ``term_key`` over the columns (or expressions) ``agent``, ``gen`` and ``term``."""
    return f"('x' || left(md5({agent} || chr(31) || {gen}::text || chr(31) || {term}), 8))::bit(32)::int4"


def chunk_keys(agent_id: str, gen: int, terms: Sequence[str]) -> list[int]:
    """A chunk's ``term_keys``: the keys of its distinct terms, sorted, without repeats."""
    return sorted({term_key(agent_id, gen, t) for t in terms})
