"""Chunk vectors: what each chunk embeds, reuse of known vectors, and embedding pending chunks in batches.

A sync writes a changed file's rows at once with the vectors already known (embedding cache, or the same
input stored elsewhere in the index) and marks the other chunks pending (``known_vectors``); keyword search
finds them immediately. ``embed_pending`` then embeds pending chunks in batches, each batch written in
its own transaction, and stops at the first provider failure, leaving the rest pending for the next sync.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from mdmem.config.load import MemorySearchConfig
from mdmem.index.chunker import Chunk
from mdmem.index.late import LatePlan, late_plan, late_setup, pool_windows
from mdmem.providers.base import EmbeddingProvider
from mdmem.store import ChunkRow, ChunkVectors
from mdmem.store.api import IndexStore
from mdmem.util.errors import ProviderError, SyncCancelled
from mdmem.util.tokens import TokenCounter, estimate_tokens

if TYPE_CHECKING:
    from concurrent.futures import Future

    import numpy as np

EMBED_BATCH_INPUTS = 256  # inputs embedded and written per phase-2 transaction (at least one chunk each)
PENDING_PAGE = 256  # pending chunks read per query
Inputs = list[tuple[str, str]]  # (sha256 of the input, input text) for one chunk: its windows, or the whole chunk


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def embedding_input(chunk: Chunk | ChunkRow) -> str:
    """The text sent to the embedding model for a whole chunk: the heading path, then the chunk text."""
    first = chunk.text.lstrip().split("\n", 1)[0]
    if chunk.heading and not first.startswith("#"):
        return f"{chunk.heading}\n{chunk.text}"
    return chunk.text


_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def embedding_inputs(chunk: Chunk | ChunkRow, window_tokens: int, count: TokenCounter | None = None) -> list[str]:
    """What is embedded for a chunk: one input per window of about ``window_tokens`` tokens, or the whole
    chunk's input when it has no windows (windows off, or a chunk that fits in one window).

    Windows are runs of whole non-blank lines, each prefixed with the heading path in force at its
    first line (so a line keeps its section and date). A chunk's vector score is its best vector's, and
    with windows that is a window's: a vector of the whole chunk as well (a chunk's most expensive input,
    ~5x a window's tokens) changed LoCoMo's hybrid R@5 / MRR by under 0.002 (README, "Indexing").
    """
    windows = embedding_windows(chunk, window_tokens, count)
    return [text for text, _, _ in windows] if windows else [embedding_input(chunk)]


def window_inputs(
    chunk: Chunk | ChunkRow, window_tokens: int, count: TokenCounter | None, late: tuple[int, int] = (0, 0)
) -> tuple[list[tuple[str, str, int, int]], LatePlan | None]:
    """A chunk's windows as (input hash, text, first line, last line), and its late-chunking plan when
    ``late`` (``late_setup``: the model's context and document prefix tokens) admits it. Empty without windows."""
    windows = embedding_windows(chunk, window_tokens, count)
    plan = late_plan(chunk, windows, count or estimate_tokens, *late) if windows and late[0] else None
    if plan is not None:
        return [(k, w.text, w.first, w.last) for k, w in zip(plan.keys, plan.windows, strict=True)], plan
    return [(sha256(text), text, first, last) for text, first, last in windows], None


def embedding_windows(
    chunk: Chunk | ChunkRow, window_tokens: int, count: TokenCounter | None = None
) -> list[tuple[str, int, int]]:
    """The windows ``embedding_inputs`` embeds for a chunk: (input text, first line, last line),
    lines 1-based in the file. Empty when the chunk has no windows."""
    if not window_tokens:
        return []
    count = count or estimate_tokens
    path = [(i + 1, part) for i, part in enumerate(chunk.heading.split(" > ")) if part] if chunk.heading else []
    windows: list[tuple[str, int, int]] = []
    lines: list[str] = []
    first = last = 0
    used = 0
    prefix = " > ".join(t for _, t in path)

    def flush() -> None:
        if lines:
            body = "\n".join(lines)
            windows.append((f"{prefix}\n{body}" if prefix else body, first, last))
            lines.clear()

    for n, line in enumerate(chunk.text.split("\n"), start=chunk.start_line):
        m = _ATX.match(line)
        if m:
            flush()
            used = 0
            level = len(m.group(1))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, m.group(2))]
            prefix = " > ".join(t for _, t in path)
            continue
        if not line.strip():
            continue
        cost = count(line)
        if lines and used + cost > window_tokens:
            flush()
            used = 0
        if not lines:
            first = n
        lines.append(line)
        last = n
        used += cost
    flush()
    return windows if len(windows) > 1 else []


@dataclass
class _Job:
    """One phase-2 batch: its chunks and inputs, the vectors known, the inputs still to embed, the embedding."""

    batch: list[tuple[ChunkRow, Inputs]]
    texts: dict[str, str]
    known: dict[str, np.ndarray]
    todo: list[str]
    future: Future[np.ndarray] | None = None
    borrowed: list[str] = field(default_factory=list)  # inputs the batch before embeds for this one too
    lender: _Job | None = None


class Counts(Protocol):
    """Where the work is counted (``SyncReport``)."""

    embedded: int
    from_cache: int


class ChunkEmbedder:
    """Vectors for one store and provider. Counts its work in the sync report passed to each call."""

    def __init__(self, store: IndexStore, provider: EmbeddingProvider, settings: MemorySearchConfig) -> None:
        self.store = store
        self.provider = provider
        self.settings = settings
        # chunks this process marked pending, by id: their inputs and the vectors known for some of them
        self._memo: dict[int, tuple[Inputs, dict[str, np.ndarray]]] = {}
        self._last: list[tuple[Inputs, dict[str, np.ndarray]] | None] = []
        self._late: dict[str, LatePlan] = {}  # late-chunked windows' input hashes -> their chunk's plan
        self._setup: tuple[int, int] | None = None

    def inputs(self, chunk: Chunk | ChunkRow) -> Inputs:
        window = self.settings.chunking.window_tokens
        if not window:
            return [(sha256(t), t) for t in embedding_inputs(chunk, window)]
        provider = self.provider
        if self._setup is None:
            self._setup = late_setup(provider, self.settings.chunking)
        # the lines' costs counted at once (one request for a provider that tokenizes remotely), and for late
        # chunking the pieces its sequence is built from (``late_plan``: each line with its newline)
        split = chunk.text.split("\n")
        texts = [line for line in split if line.strip()]
        if self._setup[0]:
            texts += ["", f"{chunk.heading}\n", *(line + "\n" for line in split[:-1]), split[-1]]
        texts = list(dict.fromkeys(texts))
        costs = dict(zip(texts, provider.count_tokens_batch(texts), strict=True))

        def count(text: str) -> int:
            known = costs.get(text)
            return provider.count_tokens(text) if known is None else known

        windows, plan = window_inputs(chunk, window, count, self._setup)
        if plan is not None:
            self._late.update(dict.fromkeys(plan.keys, plan))
        if not windows:
            text = embedding_input(chunk)
            return [(sha256(text), text)]
        return [(key, text) for key, text, _, _ in windows]

    def known_vectors(self, rows: Sequence[ChunkRow], counts: Counts) -> list[ChunkVectors | None]:
        """Each chunk's vectors when every one of its inputs was embedded before (cache or index), else None.

        Never calls the provider. Call ``remember`` with the new chunk ids once the rows are written.
        """
        import numpy as np  # here: a sync with nothing to embed never imports numpy

        keyed = [self.inputs(r) for r in rows]
        known = self._lookup([h for group in keyed for h, _ in group])
        out: list[ChunkVectors | None] = []
        self._last = []
        for group in keyed:
            keys = [h for h, _ in group]
            if all(h in known for h in keys):
                out.append((keys, np.stack([known[h] for h in keys])))
                counts.from_cache += len(keys)
                self._last.append(None)
            else:
                out.append(None)
                self._last.append((group, {h: known[h] for h in keys if h in known}))
        return out

    def remember(self, ids: Sequence[int]) -> None:
        """Keep what phase 1 learnt about the chunks it just wrote as pending (their inputs and the vectors
        already known for some of them), so phase 2 need not recount windows or look them up again."""
        for cid, learnt in zip(ids, self._last, strict=True):
            if learnt is not None:
                self._memo[cid] = learnt
        self._last = []

    def forget(self) -> None:
        """Drop what ``remember`` kept (at the end of a sync; the chunks stay pending in the index)."""
        self._memo.clear()
        self._late.clear()
        self._setup = None  # the provider may be another one, or reloaded with another context, next time

    def embed_pending(self, counts: Counts, should_stop: Callable[[], bool] | None = None) -> str | None:
        """Embed every pending chunk, one transaction per batch. Returns the provider's error, if one stopped it.

        Pipelined: while the provider embeds one batch (on another thread), this thread prepares the next
        (windows, cache look-ups) and writes the one before, so indexing costs the embedding time and little
        more. Raises ``SyncCancelled`` between batches when ``should_stop`` says so, after writing the batch
        already embedded.
        """
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="mdmemory-embed") as pool:
            running: _Job | None = None
            for batch, seen in self._pending_batches():
                if should_stop is not None and should_stop():
                    error = self._finish(running, counts)
                    if error is not None:
                        return error
                    raise SyncCancelled(
                        f"embedding for {self.store.path} stopped; the rest stays pending for the next sync"
                    )
                job = self._start(batch, seen, counts, running)
                if job.todo:  # the deadline of the caller's context (a search's budget) goes with the call
                    job.future = pool.submit(contextvars.copy_context().run, self._embed, job.todo, job.texts)
                error = self._finish(running, counts)
                if error is not None:
                    if job.future is not None:
                        job.future.exception()  # let it end: the provider is not left running after we return
                    return error
                running = job
            return self._finish(running, counts)

    def _pending_batches(self) -> Iterator[tuple[list[tuple[ChunkRow, Inputs]], dict[str, np.ndarray]]]:
        """Pending chunks in batches of about ``EMBED_BATCH_INPUTS`` inputs, with the vectors phase 1 knew."""
        after = 0
        while page := self.store.pending_chunks(PENDING_PAGE, after):
            after = page[-1].id or after
            batch: list[tuple[ChunkRow, Inputs]] = []
            seen: dict[str, np.ndarray] = {}
            size = 0
            for chunk in page:
                learnt = self._memo.pop(chunk.id, None) if chunk.id is not None else None
                if learnt is not None and learnt[0][0][0] == chunk.embed_hash:
                    group, known = learnt
                    seen.update(known)
                else:
                    group = self.inputs(chunk)
                batch.append((chunk, group))
                size += len(group)
                if size >= EMBED_BATCH_INPUTS:
                    yield batch, seen
                    batch, seen, size = [], {}, 0
            if batch:
                yield batch, seen

    def _start(
        self, batch: list[tuple[ChunkRow, Inputs]], seen: dict[str, np.ndarray], counts: Counts, running: _Job | None
    ) -> _Job:
        """A batch's inputs, the vectors already known (phase 1, the cache, the index) and what is left; an
        input the running batch is embedding is taken from it when it ends, not embedded twice."""
        texts = dict(pair for _, group in batch for pair in group)
        known = dict(seen)
        known.update(self._lookup([h for h in texts if h not in known]))
        in_flight = set(running.todo) if running is not None else set()
        borrowed = [h for h in texts if h not in known and h in in_flight]
        todo = [h for h in texts if h not in known and h not in in_flight]
        counts.from_cache += len(texts) - len(todo)  # borrowed ones too: reused, not embedded again
        return _Job(batch, texts, known, todo, borrowed=borrowed, lender=running)

    def _finish(self, job: _Job | None, counts: Counts) -> str | None:
        """Wait for a batch's embeddings and write its vectors in one transaction; the provider's error, if any."""
        if job is None:
            return None
        known = job.known
        if job.lender is not None:  # finished (and written) before this one: its vectors are known
            known.update({h: job.lender.known[h] for h in job.borrowed})
            job.lender = None
        if job.future is not None:
            try:
                fresh = job.future.result()
            except ProviderError as exc:
                return str(exc)
            p = self.provider
            new = dict(zip(job.todo, fresh, strict=True))
            known.update(new)
            counts.embedded += len(job.todo)
            if self.settings.cache.enabled:
                self.store.cache_put(p.id, p.model, p.provider_key, new)
        import numpy as np

        for h in job.todo:
            self._late.pop(h, None)
        items = []
        for chunk, group in job.batch:
            keys = [h for h, _ in group]
            items.append((chunk, (keys, np.stack([known[h] for h in keys]))))
        self.store.add_vectors(items)
        return None

    def _embed(self, todo: list[str], texts: dict[str, str]) -> np.ndarray:
        """Vectors of the inputs ``todo``: late-chunked windows from one pass over each of their chunks,
        the others embedded on their own."""
        import numpy as np

        plans = list({id(plan): plan for h in todo if (plan := self._late.get(h)) is not None}.values())
        vectors: dict[str, np.ndarray] = {}
        if plans:
            tokens = self.provider.embed_token_documents([plan.pieces for plan in plans])
            for plan, got in zip(plans, tokens, strict=True):
                if got is not None:
                    vectors.update(zip(plan.keys, pool_windows(plan, got), strict=True))
                else:  # not reached (late_plan counts the sequence exactly); never lose the vectors though
                    fallback = self.provider.embed_documents([w.text for w in plan.windows])
                    vectors.update(zip(plan.keys, fallback, strict=True))
        rest = [h for h in todo if h not in vectors]
        if rest:
            vectors.update(zip(rest, self.provider.embed_documents([texts[h] for h in rest]), strict=True))
        return np.stack([vectors[h] for h in todo])

    def _lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        """Vectors already embedded for these input hashes: the cache first, then the index itself."""
        p = self.provider
        unique = list(dict.fromkeys(hashes))
        known: dict[str, np.ndarray] = {}
        if self.settings.cache.enabled and unique:
            known = self.store.cache_get(p.id, p.model, p.provider_key, unique)
            if known:
                self.store.cache_touch(p.id, p.model, p.provider_key, list(known))
        missing = [h for h in unique if h not in known]
        if missing:
            known.update(self.store.vectors_by_hash(missing))
        return known
