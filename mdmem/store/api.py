"""The index interface both stores (SQLite, PostgreSQL) offer.

``SearchStore`` is what searching asks: ``mdmem.search.hybrid`` is written against it, so it runs unchanged on
either; keyword arguments are plain query terms (each store turns them into its own query: an FTS5 MATCH,
or its postings). ``IndexStore`` is everything else the indexer, ``Memory``, status, the pack and
``mdmem.store.copy`` use, none of them knowing which store it talks to (``mdmem.store.open`` picks one).
``EntryLog`` is the database's record of retained entries and tombstones, which only a shared store keeps
(PostgreSQL): what ``mdmem serve`` replicas without an agent's files retain and forget.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mdmem.files.links import Link
from mdmem.files.pending import PendingEntry, Tombstone
from mdmem.files.supersession import Supersession

if TYPE_CHECKING:
    import numpy as np

    from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow, UsageRow
    from mdmem.util.errors import StoreError


EntryStatus = Literal["retained", "duplicate", "forgotten"]


class EntryLog(Protocol):
    """One agent's retained entries and tombstones in a shared database (``mdmem.store.pg.entries``).

    An entry is ``pending`` (only here) until the host that holds the agent's files writes its block into
    ``sessions/<day>.md`` and marks it ``written``; a tombstone is unapplied until that host has removed the
    block from its files. Entries with a tombstone are never pending."""

    def retain(self, entry_id: str, day: str, block: str) -> EntryStatus:
        """Keep a new entry pending (committed before it returns); ``duplicate`` or ``forgotten`` otherwise."""
        ...

    def record(self, entry_id: str, day: str) -> None:
        """An entry written into the files directly (a replica that holds them): known from now on."""
        ...

    def known(self, entry_id: str) -> EntryStatus | None: ...

    def pending(self, limit: int = 1000) -> list[PendingEntry]:
        """Pending entries without a tombstone, oldest first."""
        ...

    def written(self, entry_ids: Sequence[str]) -> None: ...

    def forget(self, entry_ids: Sequence[str], reason: str | None, *, applied: bool) -> int:
        """Tombstone ``entry_ids`` (``applied``: their blocks are out of the files already); returns how many
        entries known here changed to forgotten."""
        ...

    def unapplied(self) -> list[Tombstone]: ...

    def applied(self, entry_ids: Sequence[str]) -> None: ...

    def has_work(self) -> bool:
        """Whether the files' host has something to do: a pending entry or an unapplied tombstone."""
        ...

    def version(self) -> tuple[int, int]:
        """Changes when an entry is retained or a tombstone added (what a replica's catch-up compares)."""
        ...

    def stats(self) -> dict[str, int]: ...

    def claim_pod(self, pod: str) -> tuple[str, float]:
        """The pod the agent serves and since when (a UNIX time): ``pod`` when no pod had claimed it yet
        (committed before it returns), else the one that did (mdmem.service.pods)."""
        ...

    def pod_claim(self) -> tuple[str, float] | None:
        """The pod that claimed the agent and when; None when none has."""
        ...

    def close(self) -> None: ...


class SearchStore(Protocol):
    def chunk_count(self) -> int: ...

    def pending_count(self) -> int: ...

    def keyword(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def keyword_matches(self, terms: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]: ...

    def term_frequency_at_least(self, term: str, limit: int) -> int: ...

    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]: ...

    def start_knn(self, query: np.ndarray, k: int) -> Callable[[], list[tuple[int, float]]]: ...

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]: ...

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]: ...

    def supersessions_touching(self, paths: Sequence[str]) -> list[Supersession]:
        """The supersessions (mdmem.files.supersession) whose old or new line is in one of ``paths``."""
        ...

    def find_links(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]:
        """The links and aliases (mdmem.files.links) held by one of ``paths``, or to one of ``targets``, or
        naming one of ``names`` (every one when ``paths`` is None and nothing else is asked), by file and line."""
        ...


class IndexStore(SearchStore, Protocol):
    """What the indexer, ``Memory``, status, the pack and the copy between stores use: one agent's index on
    either store (``mdmem.store.Store``, SQLite; ``mdmem.store.pg.PgStore``, PostgreSQL).

    Each store keeps its own mechanics behind these: the writer lock (a lock file, or an advisory lock),
    rebuilds (a generation file swapped in by a symlink, or a generation switched live in a transaction),
    what ``refresh`` follows. ``open_store`` (``mdmem.store.open``) picks one from the configuration.
    """

    @property
    def path(self) -> str | os.PathLike[str]:
        """Where the index is, for messages (a file, or a URL without its password)."""
        ...

    @property
    def inode(self) -> int | None:
        """The database file's inode (None when the index is not a file): which file a fault was seen in."""
        ...

    @property
    def write_fault(self) -> StoreError | None: ...

    # -- life -------------------------------------------------------------------------------------
    def close(self) -> None: ...

    def refresh(self) -> bool: ...

    def reopen(self) -> None: ...

    def ensure_writable(self) -> None: ...

    def claim_workspace(self) -> dict[str, Any] | None:
        """Make the agent's workspace on this host the one its index belongs to, in place of another
        (PostgreSQL: one index, many hosts; SQLite: nothing to do, the file is this host's). Returns the
        claim it replaced (None: none, or this workspace's already)."""
        ...

    def reading(self) -> contextlib.AbstractContextManager[Any]:
        """A block of calls that share what they need (PostgreSQL: one connection borrowed from the
        process's pool for them all, instead of one per call; SQLite: nothing)."""
        ...

    def writing(self, wait: float) -> contextlib.AbstractContextManager[None]:
        """Hold the agent's writer lock for the block (``LockError`` after ``wait`` seconds)."""
        ...

    def embedding_turn(self) -> contextlib.AbstractContextManager[bool]:
        """Try the embedding lock without waiting: the block gets True when this process holds it."""
        ...

    def tidy(self) -> None:
        """Remove what a killed writer left behind (called under the writer lock)."""
        ...

    def settle(self) -> None:
        """Make what the last writes deferred ready for readers (at the end of a sync, and of a rebuild before
        it is switched in): PostgreSQL builds the vector index of a generation loaded without one."""
        ...

    def begin_rebuild(self) -> IndexStore:
        """An empty index beside the live one (seeded with the embedding cache) for a rebuild to fill."""
        ...

    def finish_rebuild(self, built: IndexStore) -> None:
        """Make ``built`` the live index at once; readers see the old one or the new one, never half."""
        ...

    def abandon_rebuild(self, built: IndexStore) -> None: ...

    # -- meta and files ---------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...

    def delete_meta(self, key: str) -> None: ...

    def files(self) -> dict[str, FileRow]: ...

    def touch_file(self, path: str, mtime: float, size: int) -> None: ...

    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        supersessions: Sequence[Supersession] = (),
        links: Sequence[Link] = (),
    ) -> list[int]: ...

    def delete_file(self, path: str) -> None: ...

    def chunks_of(self, path: str) -> list[ChunkRow]: ...

    def paths_with_text(self, needles: Sequence[str], source: str) -> list[str]:
        """The indexed files of ``source`` with a chunk that contains one of ``needles`` (plain text)."""
        ...

    # -- uses (not derived from the files: kept across rebuilds) ----------------------------------
    def add_usage(self, rows: Sequence[UsageRow], *, replace: bool = False) -> None:
        """Add ``rows``' uses to the counts in one transaction (``StoreError`` kind ``read-only`` when the index
        cannot be written: the caller drops them); ``replace``: the counts become ``rows``."""
        ...

    def usage_rows(self, path: str | None = None) -> list[UsageRow]:
        """Every use count, or those of ``path``, by path, chunk and kind."""
        ...

    def move_usage(self, old: str, new: str) -> None:
        """Give ``old``'s counts to ``new`` (a file the lifecycle moved)."""
        ...

    def entry_log(self) -> EntryLog | None:
        """The agent's retained entries and tombstones in this store, on its connection (None: SQLite)."""
        ...

    def counts(self) -> dict[str, int]: ...

    # -- vectors, pending chunks and the embedding cache ------------------------------------------
    def vec_dims(self) -> int | None: ...

    def pending_chunks(self, limit: int, after_id: int = 0) -> list[ChunkRow]: ...

    def add_vectors(self, items: Sequence[tuple[ChunkRow, ChunkVectors]]) -> int: ...

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, ChunkVectors]: ...

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def vector_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, dict[str, float]]: ...

    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None: ...

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None: ...

    def cache_prune(self, max_entries: int) -> int: ...

    def cache_entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        """The whole embedding cache, in groups: ((provider, model, provider key), {input hash: vector})."""
        ...
