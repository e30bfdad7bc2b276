"""Split a Markdown memory file into overlapping chunks that cite exact 1-based line ranges.

markdown-it-py finds the block structure; the chunker then works on whole lines. Every line boundary
gets a rank (before a top-level heading > after a blank line or at a block start > at a list item >
between lines > right after a heading > inside a fenced/indented code block, table, front matter or
multi-line setext heading). Lines are packed greedily up to the token budget; when a break is needed,
the latest heading boundary that leaves the chunk at least half full wins, then the latest block
boundary, then the latest list item boundary (each also at least half full), then the latest line
boundary. Code blocks and tables are split only when they do not fit in a chunk by themselves.

Each chunk after the first starts with whole trailing lines of the previous chunk totalling at most
``overlap`` tokens, except that the overlap never crosses a top-level heading: a chunk that starts at a
heading has no overlap and an overlap stops at its section's heading. A single line over the budget
(a minified blob, a paragraph of CJK text) becomes several chunks with ``start_line == end_line`` whose
texts are consecutive, non-overlapping slices of the line, so ``"".join(texts) == line`` (a slice that is
only whitespace is dropped, like any whitespace-only chunk).

Lines are ``mdmem.util.fileread.split_lines`` of the text, the one definition ``memory_get`` and the session
files share: only ``\\n`` ends a line (a ``\\r`` before it is dropped, a lone ``\\r`` stays inside its line and
never ends a Markdown block either), and the text of a normal chunk is exactly
``"\\n".join(lines[start_line - 1 : end_line])``.
"""

from __future__ import annotations

import functools
import hashlib
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mdmem.util.fileread import split_lines
from mdmem.util.tokens import TokenCounter, estimate_tokens

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

__all__ = ["Chunk", "chunk_markdown"]


@dataclass(frozen=True)
class Chunk:
    """A span of a Markdown file, ready to be embedded and indexed."""

    path: str  # workspace-relative posix path, passed in
    start_line: int  # 1-based inclusive
    end_line: int  # 1-based inclusive
    text: str  # the chunk's text
    hash: str  # sha256 hex of text (utf-8)
    heading: str  # heading path at the chunk's start, e.g. "Projects > mdmem"; "" if none


# Boundary ranks: how good it is to start a chunk at a line (higher is better).
_HARD, _HARD_BLANK, _WEAK, _LINE, _ITEM, _BLOCK, _HEADING = range(7)
_PREFERRED = (_HEADING, _BLOCK, _ITEM)  # taken only when the chunk is at least half full
_HARD_TYPES = frozenset({"fence", "code_block", "table_open"})
_CUT_AFTER = " \t\u3002\uff01\uff1f\uff1b\uff0c\u3001,;"  # where a long line is best cut (after the char)

# Block structure only: inline parsing is most of markdown-it's cost and only headings need it.


@functools.cache
def _parsers() -> tuple[MarkdownIt, MarkdownIt]:
    """The block parser (tables on, inline rules off) and the inline parser, made on first use: importing
    markdown-it costs more than a command that chunks nothing (``get``, a search with nothing to index)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable(["inline", "text_join"]), MarkdownIt("commonmark")


@dataclass
class _Doc:
    lines: list[str]
    blank: list[bool]
    cost: list[int]  # tokens of each line including its newline
    rank: list[int]  # rank of the boundary just before each line
    block_end: dict[int, int]  # first line of a code block, table... -> its exclusive end
    heading_starts: list[int]  # 0-based first line of each top-level heading
    heading_paths: list[str]  # heading path in effect from that line on

    def heading_at(self, line: int) -> str:
        i = bisect_right(self.heading_starts, line) - 1
        return self.heading_paths[i] if i >= 0 else ""


def chunk_markdown(
    text: str,
    path: str,
    *,
    tokens: int = 400,
    overlap: int = 80,
    count_tokens: TokenCounter = estimate_tokens,
    count_many: Callable[[Sequence[str]], list[int]] | None = None,
) -> list[Chunk]:
    """Split Markdown ``text`` into chunks of at most ``tokens`` tokens, as counted by ``count_tokens``.

    ``count_many``, when given, counts many texts at once as ``count_tokens`` would (a provider whose
    tokenizer costs a request per call counts every line's cost in one).

    ``path`` is stored on every chunk as given. Consecutive chunks share about ``overlap`` tokens of
    whole lines (capped at half of ``tokens``). Blank lines never start or end a chunk and empty or
    whitespace-only input gives ``[]``. Every non-blank character of the input is in some chunk.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    if overlap < 0:
        raise ValueError(f"overlap must not be negative, got {overlap}")
    if not text.strip():
        return []
    overlap = min(overlap, tokens // 2)
    doc = _analyse(split_lines(text), count_tokens, count_many)
    chunks: list[Chunk] = []
    prev: tuple[int, int] | None = None  # first and last line of the previous line-range chunk
    fresh, n = 0, len(doc.lines)
    while True:
        while fresh < n and doc.blank[fresh]:
            fresh += 1
        if fresh >= n:
            return chunks
        span = None
        if doc.cost[fresh] <= tokens:
            start = fresh if prev is None else _overlap_start(doc, prev, fresh, overlap)
            span = _fit(doc, start, fresh, tokens, count_tokens)
        if span is None:
            heading = doc.heading_at(fresh)
            for piece in _split_long_line(doc.lines[fresh], tokens, count_tokens, doc.cost[fresh]):
                if piece.strip():
                    chunks.append(_chunk(path, fresh, fresh, piece, heading))
            prev, fresh = None, fresh + 1
            continue
        first, last = span
        chunks.append(_chunk(path, first, last, "\n".join(doc.lines[first : last + 1]), doc.heading_at(first)))
        prev, fresh = span, last + 1


def _chunk(path: str, first: int, last: int, text: str, heading: str) -> Chunk:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Chunk(path, first + 1, last + 1, text, digest, heading)


def _analyse(lines: list[str], count: TokenCounter, count_many: Callable[[Sequence[str]], list[int]] | None) -> _Doc:
    """Token cost, boundary rank and heading path of every line."""
    n = len(lines)
    blank = [not line.strip() for line in lines]
    costed = [line if b else line + "\n" for line, b in zip(lines, blank, strict=True)]
    cost = count_many(costed) if count_many is not None else [count(t) for t in costed]
    rank = [_BLOCK if i and blank[i - 1] else _LINE for i in range(n)]
    hard: list[tuple[int, int]] = []
    front = _front_matter_end(lines)
    if front:
        hard.append((0, front))
        if front < n:
            rank[front] = max(rank[front], _BLOCK)
    source = "\n" * front + "\n".join(lines[front:])  # blank out front matter, keep line numbers
    source = source.replace("\r", " ")  # markdown-it takes a lone CR for a line break: keep its numbering ours
    heading_ends: list[int] = []
    heading_starts: list[int] = []
    heading_paths: list[str] = []
    stack: list[tuple[int, str]] = []
    tokens = _parsers()[0].parse(source)
    for i, tok in enumerate(tokens):
        if tok.map is None:
            continue
        start, end = tok.map
        if tok.level == 0 and tok.nesting >= 0:
            rank[start] = max(rank[start], _BLOCK)
        if tok.type == "list_item_open":
            rank[start] = max(rank[start], _ITEM)
        if tok.type in _HARD_TYPES:
            hard.append((start, end))
        if tok.type == "heading_open" and tok.level == 0:
            level = int(tok.tag[1:])
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, _heading_text(tokens[i + 1])))
            rank[start] = _HEADING
            hard.append((start, end))
            heading_ends.append(end)
            heading_starts.append(start)
            heading_paths.append(" > ".join(title for _, title in stack if title))
    for end in heading_ends:  # ending a chunk right after a heading leaves the heading dangling
        while end < n and blank[end]:
            end += 1
        if end < n and rank[end] > _HARD_BLANK:
            rank[end] = _WEAK
    block_end: dict[int, int] = {}
    for start, end in hard:
        block_end[start] = max(block_end.get(start, 0), min(end, n))
        for i in range(start + 1, min(end, n)):
            rank[i] = _HARD_BLANK if blank[i - 1] else _HARD
    return _Doc(lines, blank, cost, rank, block_end, heading_starts, heading_paths)


def _front_matter_end(lines: list[str]) -> int:
    """Number of lines of a leading YAML front matter block (``---`` ... ``---``/``...``), or 0."""
    if lines[0].rstrip() != "---":
        return 0
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return i + 1
    return 0


def _heading_text(inline: Token) -> str:
    """Plain text of a heading's inline content: markup dropped, line breaks and runs of spaces folded."""
    parts: list[str] = []
    for tok in _parsers()[1].parseInline(inline.content)[0].children or []:
        if tok.type in ("text", "code_inline", "image"):
            parts.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return " ".join("".join(parts).split())


def _overlap_start(doc: _Doc, prev: tuple[int, int], fresh: int, overlap: int) -> int:
    """First line of the next chunk: ``fresh`` moved back over trailing lines of the previous chunk."""
    if overlap <= 0 or doc.rank[fresh] == _HEADING:
        return fresh
    in_hard = doc.rank[fresh] <= _HARD_BLANK  # continuing a split code block or table
    best, total = fresh, 0
    for k in range(prev[1], prev[0], -1):  # never back to prev[0]: not the whole previous chunk
        total += doc.cost[k]
        if total > overlap:
            break
        if doc.blank[k]:
            continue
        if in_hard or doc.rank[k] > _HARD_BLANK:  # never start mid-block, e.g. on a closing fence
            best = k
        if doc.rank[k] == _HEADING:
            break
    return best


def _fit(doc: _Doc, start: int, fresh: int, budget: int, count: TokenCounter) -> tuple[int, int] | None:
    """First and last line of the chunk beginning at ``start`` (``fresh`` is its first new line).

    The per-line costs only approximate the joined text's count, so the chosen text is counted once
    and the chunk shortened while it is over budget. Returns None when line ``fresh`` alone is over.
    """
    limit = len(doc.lines) + 1
    while True:
        end = _choose_end(doc, start, fresh, limit, budget)
        if end is None:
            if start == fresh:
                return None
            start, limit = fresh, len(doc.lines) + 1  # drop the overlap rather than split a block
            continue
        block_end = doc.block_end.get(fresh, 0)
        if start == fresh and end < block_end and doc.rank[end] <= _HARD_BLANK:
            # Summed line costs overestimate; keep the block whole if its exact count fits.
            last = _last_text_line(doc, block_end)
            if count("\n".join(doc.lines[start : last + 1])) <= budget:
                return start, last
        last = _last_text_line(doc, end)
        if count("\n".join(doc.lines[start : last + 1])) <= budget:
            return start, last
        limit = end


def _last_text_line(doc: _Doc, end: int) -> int:
    """Index of the last non-blank line before ``end``."""
    last = end - 1
    while doc.blank[last]:
        last -= 1
    return last


def _choose_end(doc: _Doc, start: int, fresh: int, limit: int, budget: int) -> int | None:
    """Exclusive end line (below ``limit``) of the best break for a chunk from ``start``, or None.

    With overlap (``start < fresh``) returns None rather than break inside a code block or table,
    unless the chunk continues one that is already being split.
    """
    latest, fill = [-1] * 7, [0] * 7
    total = used = 0  # cost of lines [start, j); cost up to the last non-blank line
    j, n = start, len(doc.lines)
    while j < n:
        if j >= limit:
            break
        if j > fresh and not doc.blank[j]:
            latest[doc.rank[j]], fill[doc.rank[j]] = j, used
        total += doc.cost[j]
        if not doc.blank[j]:
            used = total
            if used > budget:
                break
        j += 1
    else:
        if n < limit:
            return n
    for rank in _PREFERRED:
        if latest[rank] >= 0 and 2 * fill[rank] >= budget:
            return latest[rank]
    for best in (max(latest[_LINE:]), latest[_WEAK]):
        if best >= 0:
            return best
    if start < fresh and doc.rank[fresh] > _HARD_BLANK:
        return None
    if latest[_HARD_BLANK] >= 0 and 2 * fill[_HARD_BLANK] >= budget:
        return latest[_HARD_BLANK]
    best = max(latest[_HARD], latest[_HARD_BLANK])
    return best if best >= 0 else None


def _split_long_line(line: str, budget: int, count: TokenCounter, line_cost: int) -> list[str]:
    """Cut ``line`` into consecutive slices of at most ``budget`` tokens, preferably after whitespace.

    Each slice length is found by galloping from the previous one and bisecting, so every count is on
    a window about one slice long: linear in the line's length, not quadratic.
    """
    pieces: list[str] = []
    guess = max(1, budget * len(line) // max(line_cost, 1))
    pos = 0
    while pos < len(line):
        size = max(1, _longest_slice(line, pos, budget, count, guess))
        end = pos + size
        if end < len(line):
            cut = max(line.rfind(ch, pos + size // 2, end) for ch in _CUT_AFTER)
            if cut >= 0:
                end = cut + 1
        pieces.append(line[pos:end])
        guess, pos = size, end
    return pieces


def _longest_slice(line: str, pos: int, budget: int, count: TokenCounter, guess: int) -> int:
    """About the largest k with ``count(line[pos : pos + k]) <= budget`` (0 if none).

    Gallops from ``guess`` (the previous slice's length) and bisects to within ~3%, so a homogeneous
    line costs about two counts of one slice each. Assumes the counter is monotone in the prefix.
    """

    def fits(k: int) -> bool:
        return count(line[pos : pos + k]) <= budget

    limit = len(line) - pos
    k = min(guess, limit)
    step = tolerance = max(1, k // 32)  # within ~3% of the longest is long enough
    if fits(k):
        lo = k
        while lo < limit:
            nxt = min(lo + step, limit)
            if not fits(nxt):
                hi = nxt
                break
            lo, step = nxt, step * 2
        else:
            return limit
    else:
        hi = k
        while True:
            lo = max(hi - step, 0)
            if lo == 0 or fits(lo):
                break
            hi, step = lo, step * 2
    while hi - lo > tolerance:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
