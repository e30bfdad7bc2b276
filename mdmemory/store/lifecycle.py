"""The SQLite store's writer lock, embedding lock and rebuilds: what ``IndexStore`` asks of it besides rows.

- **Writer lock**: a lock file beside the database (``<index>.lock``), one writer per index across
  processes; the embedding phase has its own (``<index>.embed.lock``) so others index text meanwhile.
- **Rebuilds** write a new generation file beside the live index, seeded with its embedding cache, and
  swap it in with one atomic rename of a symlink (``mdmemory.store.generations``); what a killed rebuild
  leaves is removed by the next writer (``tidy``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdmemory.errors import LockError
from mdmemory.store.connection import remove_database, transaction
from mdmemory.store.generations import live_file, next_generation, remove_orphans, swap_in
from mdmemory.store.vectors import decode_vector

if TYPE_CHECKING:
    import numpy as np

    from mdmemory.store.api import IndexStore
    from mdmemory.store.index import Store


class SqliteLifecycle:
    """Mixed into ``Store``."""

    path: Path
    conn: Any

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def writing(self, wait: float) -> contextlib.AbstractContextManager[None]:
        return _file_lock(Path(f"{self.path}.lock"), wait, self.path)

    @contextlib.contextmanager
    def embedding_turn(self) -> Iterator[bool]:
        from filelock import FileLock, Timeout  # here: a search with nothing to index takes no lock (12 ms)

        lock = FileLock(f"{self.path}.embed.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def tidy(self) -> None:
        remove_orphans(self.path)

    def settle(self) -> None:
        """Nothing is deferred: sqlite-vec's index takes each vector as it is written."""

    def begin_rebuild(self) -> Store:
        from mdmemory.store.index import Store

        target = next_generation(self.path)
        fresh = Store(target)
        try:
            fresh.conn.execute("ATTACH DATABASE ? AS live", (str(live_file(self.path)),))
            with transaction(fresh.conn):
                fresh.conn.execute("INSERT OR IGNORE INTO main.embedding_cache SELECT * FROM live.embedding_cache")
            fresh.conn.execute("DETACH DATABASE live")
        except BaseException:
            fresh.close()
            remove_database(target)
            raise
        return fresh

    def finish_rebuild(self, built: IndexStore) -> None:
        built.close()
        swap_in(self.path, Path(built.path))
        self.reopen()

    def abandon_rebuild(self, built: IndexStore) -> None:
        built.close()
        remove_database(Path(built.path))

    def reopen(self) -> None:  # provided by Store
        raise NotImplementedError

    def delete_meta(self, key: str) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def cache_entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        group: tuple[str, str, str] | None = None
        items: dict[str, np.ndarray] = {}
        rows = self.conn.execute(
            "SELECT provider, model, provider_key, hash, embedding FROM embedding_cache "
            "ORDER BY provider, model, provider_key, hash"
        )
        for provider, model, key, digest, blob in rows:
            if group != (provider, model, key) and items:
                assert group is not None
                yield group, items
                items = {}
            group = (provider, model, key)
            items[str(digest)] = decode_vector(blob)
        if items and group is not None:
            yield group, items


@contextlib.contextmanager
def _file_lock(lock_path: Path, wait: float, index: Path) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=wait)
    except Timeout as exc:
        raise LockError(
            f"another mdmemory process is writing {index} (lock {lock_path}); wait for it to finish or stop it"
        ) from exc
    try:
        yield
    finally:
        lock.release()
