"""1-hop neighbours: the chunks a hit links to, and the chunks that link to it (mdmem.files.links), brought
along with a search or a pack even when the search did not find them.

For each hit, best first: every link held by one of its lines gives the chunk of the target that holds the
linked heading (its first chunk for a link to the whole file); every link into the hit's file (by path, by the
file's name or one of its aliases) from a line outside the hit gives the chunk holding that line (a link to a
heading counts only for the hit holding that heading). A neighbour is
scored ``NEIGHBOR_SHARE`` of the hit it came through and marked ``via`` that hit; a chunk already among the
hits or reached before is not added twice. Broken and refused links lead nowhere.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from mdmem.files.links import Link, Resolver, fold_name, heading_slug
from mdmem.files.supersession import Supersession
from mdmem.search.hybrid import Hit, SearchOutcome
from mdmem.search.query import keyword_terms, query_terms
from mdmem.search.results import cite
from mdmem.search.truth import mention_counter, query_names
from mdmem.store import ChunkRow, FileRow
from mdmem.store.lines import file_lines

__all__ = [
    "NEIGHBOR_SHARE",
    "LinkReader",
    "Neighbour",
    "heading_line_of",
    "neighbours",
    "with_neighbours",
    "with_predecessors",
    "with_replacements",
]

NEIGHBOR_SHARE = 0.9


class LinkReader(Protocol):
    def files(self) -> dict[str, FileRow]: ...

    def chunks_of(self, path: str) -> list[ChunkRow]: ...

    def find_links(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]: ...

    def supersessions_touching(self, paths: Sequence[str]) -> list[Supersession]: ...


@dataclass(frozen=True)
class Neighbour:
    hit: Hit  # the neighbour's chunk, scored
    via: Hit  # the hit it was reached from
    direction: str  # "link" (the hit links to it) or "backlink" (it links to the hit)


def neighbours(store: LinkReader, hits: Sequence[Hit], limit: int) -> list[Neighbour]:
    """At most ``limit`` neighbours of ``hits`` (see the module docstring), in the order of the hits."""
    if not hits or limit < 1:
        return []
    paths = sorted({h.chunk.path for h in hits})
    held = store.find_links(paths)
    names = {fold_name(posixpath.basename(p)) for p in paths} | {k.name for k in held if k.name}
    into = store.find_links(None, paths, sorted(names)) if names or paths else []
    resolver = Resolver(store.files(), [k for k in (*held, *into) if k.kind == "alias"])
    chunks: dict[str, list[ChunkRow]] = {}

    def chunks_of(path: str) -> list[ChunkRow]:
        if path not in chunks:
            chunks[path] = store.chunks_of(path)
        return chunks[path]

    seen = {(h.chunk.path, h.chunk.start_line, h.chunk.end_line) for h in hits}
    out: list[Neighbour] = []
    for hit in hits:
        c = hit.chunk
        found: list[tuple[ChunkRow, str]] = []
        for link in held:
            if link.path == c.path and link.kind == "link" and c.start_line <= link.line <= c.end_line:
                target = resolver.target(link)
                if target is not None:
                    chunk = _chunk_at(chunks_of(target), heading_line_of(chunks_of(target), link.heading) or 1)
                    if chunk is not None:
                        found.append((chunk, "link"))
        my_names = resolver.names_of(c.path)
        headings = _headings_within(c)
        for link in into:
            if link.kind != "link" or link.path == c.path and c.start_line <= link.line <= c.end_line:
                continue
            if resolver.target(link) != c.path and not (not link.target and link.name in my_names):
                continue
            if link.heading and link.heading not in headings:
                continue
            chunk = _chunk_at(chunks_of(link.path), link.line)
            if chunk is not None:
                found.append((chunk, "backlink"))
        for chunk, direction in found:
            key = (chunk.path, chunk.start_line, chunk.end_line)
            if key in seen:
                continue
            seen.add(key)
            out.append(Neighbour(Hit(chunk, hit.score * NEIGHBOR_SHARE), hit, direction))
            if len(out) >= limit:
                return out
    return out


def heading_line_of(chunks: list[ChunkRow], slug: str) -> int:
    """The line of the heading ``slug`` names in the file of ``chunks`` (1 for no heading; 0 when it has none)."""
    if not slug:
        return 1
    for n, line in enumerate(file_lines(chunks), start=1):
        if line.lstrip().startswith("#") and heading_slug(line.lstrip().lstrip("#")) == slug:
            return n
    return 0


def _answering(hits: Sequence[Hit], query: str) -> Callable[[str], bool]:
    """Whether a line answers ``query``. When the query names something (mdmem.search.truth.query_names:
    ``Dmitri Brandt``, ``Nimbus-14``), a line naming all of it does, and no other (``Dmitri Costa works at
    Acme`` does not answer "where does Dmitri Brandt work"). Otherwise a line holding at least half of the
    query's words, and as many as the line of the hits holding the most."""
    names = query_names(query)
    if names:
        named, every = mention_counter(names), len(keyword_terms(query_terms(names)))
        return lambda text: named(text) >= every
    count = mention_counter(query)
    best = max((count(line) for h in hits for line in h.chunk.text.split("\n")), default=0)
    need = max(1, (len(keyword_terms(query_terms(query))) + 1) // 2, best)
    return lambda text: count(text) >= need


def _chunk_at(chunks: list[ChunkRow], line: int) -> ChunkRow | None:
    """The chunk that starts closest before ``line`` and holds it (the heading's own section when it has one)."""
    holding = [c for c in chunks if c.start_line <= line <= c.end_line]
    return max(holding, key=lambda c: c.start_line) if holding else (chunks[0] if chunks else None)


def _headings_within(chunk: ChunkRow) -> set[str]:
    return {heading_slug(t.lstrip().lstrip("#")) for t in chunk.text.split("\n") if t.lstrip().startswith("#")}


def with_neighbours(store: LinkReader, outcome: SearchOutcome, limit: int) -> SearchOutcome:
    """``outcome`` with the hits' neighbours after its hits, each marked ``via`` (``outcome.via``), and the
    supersessions touching their files too."""
    found = neighbours(store, outcome.hits, limit)
    if not found:
        return outcome
    via = {n.hit.chunk.id: cite(n.via.chunk.path, n.via.chunk.start_line, n.via.chunk.end_line) for n in found}
    hits = [*outcome.hits, *(n.hit for n in found)]
    more = sorted({n.hit.chunk.path for n in found} - {h.chunk.path for h in outcome.hits})
    sups = [*outcome.supersessions, *(store.supersessions_touching(more) if more else [])]
    return replace(outcome, hits=hits, via={k: v for k, v in via.items() if k is not None}, supersessions=sups)


def with_replacements(store: LinkReader, outcome: SearchOutcome, query: str, hops: int = 3) -> SearchOutcome:
    """``outcome`` with, right before each hit holding a superseded line that answers ``query`` (holds at least
    half of its words), the chunk holding the line that superseded it when no hit holds that line (following a
    chain up to ``hops`` lines on), scored as that hit, or the hit holding it moved up there (scored as that hit
    when it scored lower, so that the pack's minScore does not drop it): a pack then finds
    the current line first wherever the search found an older one (mdmem.engine.packing). Other lines of the
    hit (other subjects' facts in the same daily log) bring nothing."""
    sups = list(outcome.supersessions)
    answers = _answering(outcome.hits, query)
    holder: dict[tuple[str, int], Hit] = {}
    for h in outcome.hits:
        for n in range(h.chunk.start_line, h.chunk.end_line + 1):
            holder.setdefault((h.chunk.path, n), h)
    newer = {(s.old_path, s.old_line): (s.new_path, s.new_line) for s in sups if s.new_path}
    hits: list[Hit] = []
    added = False
    for hit in outcome.hits:
        c = hit.chunk
        parts = c.text.split("\n")
        for n in range(c.start_line, c.end_line + 1):
            key, steps = (c.path, n), 0
            if key not in newer or len(parts) != c.end_line - c.start_line + 1:
                continue
            if not answers(parts[n - c.start_line]):
                continue
            chain: list[Hit] = []  # the lines that replaced it, oldest first
            while key in newer and steps < hops:
                key, steps = newer[key], steps + 1
                if key in holder:  # a hit already: it moves up, before the older line's hit, scored at least as
                    held = holder[key]  # that hit (as a chunk fetched for it is), so the pack's minScore keeps it
                    chain.append(held if held.score >= hit.score else replace(held, score=hit.score))
                    continue
                chunk = _chunk_at(store.chunks_of(key[0]), key[1])
                if chunk is None or not chunk.start_line <= key[1] <= chunk.end_line:
                    break
                new_hit = Hit(chunk, hit.score, hit.vector_score, hit.text_score)
                holder.update(((chunk.path, m), new_hit) for m in range(chunk.start_line, chunk.end_line + 1))
                chain.append(new_hit)
                more = store.supersessions_touching([chunk.path])
                sups += more
                newer.update({(s.old_path, s.old_line): (s.new_path, s.new_line) for s in more if s.new_path})
            hits.extend(reversed(chain))  # the newest first, then the versions between, newest to oldest
            added = added or bool(chain)
        hits.append(hit)
    return replace(outcome, hits=_once(hits), supersessions=list(dict.fromkeys(sups))) if added else outcome


def with_predecessors(store: LinkReader, outcome: SearchOutcome, query: str) -> SearchOutcome:
    """``outcome`` with, right after each hit holding a line that answers ``query`` and supersedes another, the
    chunk holding the line it superseded (the hit holding it moved up there, or its chunk brought in): for a
    question about the past (mdmem.pack.currency keeps one such older line), the version just before the one
    found. One step back, never more."""
    answers = _answering(outcome.hits, query)
    older = {(s.new_path, s.new_line): (s.old_path, s.old_line) for s in outcome.supersessions if s.new_path}
    holder: dict[tuple[str, int], Hit] = {}
    for h in outcome.hits:
        for n in range(h.chunk.start_line, h.chunk.end_line + 1):
            holder.setdefault((h.chunk.path, n), h)
    hits: list[Hit] = []
    placed: set[int] = set()
    for hit in outcome.hits:
        if id(hit) in placed:
            continue
        hits.append(hit)
        placed.add(id(hit))
        c = hit.chunk
        parts = c.text.split("\n")
        if len(parts) != c.end_line - c.start_line + 1:
            continue
        for n, text in enumerate(parts, start=c.start_line):
            key = older.get((c.path, n))
            if key is None or not answers(text):
                continue
            before = holder.get(key)
            if before is None:
                chunk = _chunk_at(store.chunks_of(key[0]), key[1])
                if chunk is None or not chunk.start_line <= key[1] <= chunk.end_line:
                    continue
                before = Hit(chunk, hit.score, hit.vector_score, hit.text_score)
                holder.update(((chunk.path, m), before) for m in range(chunk.start_line, chunk.end_line + 1))
            if id(before) not in placed:  # scored at least as the hit it follows, so minScore keeps it
                hits.append(before if before.score >= hit.score else replace(before, score=hit.score))
                placed.add(id(before))
    return replace(outcome, hits=hits) if len(hits) != len(outcome.hits) or hits != list(outcome.hits) else outcome


def _once(hits: list[Hit]) -> list[Hit]:
    """Each chunk once, where it first comes (a hit moved up is not repeated where it was), with its best score."""
    first: dict[tuple[str, int, int], int] = {}
    out: list[Hit] = []
    for h in hits:
        key = (h.chunk.path, h.chunk.start_line, h.chunk.end_line)
        if key not in first:
            first[key] = len(out)
            out.append(h)
        elif h.score > out[first[key]].score:
            out[first[key]] = h
    return out
