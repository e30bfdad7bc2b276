"""The SQLite store's writer lock, embedding lock and rebuilds: what ``IndexStore`` asks of it besides rows.

- **Writer lock**: a lock file beside the database (``<index>.lock``), one writer per index across
  processes; the embedding phase has its own (``<index>.embed.lock``) so others index text meanwhile.
- **Rebuilds** write a new generation file beside the live index, seeded with its embedding cache and
  use counts, and swap it in with one atomic rename of a symlink (``mdmem.store.generations``); what a killed rebuild
  leaves is removed by the next writer (``tidy``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from mdmem.store.connection import remove_database, transaction
from mdmem.store.generations import live_file, next_generation, remove_orphans, swap_in
from mdmem.util.errors import LockError


class Built(Protocol):
    """A store on a generation file, finished or abandoned."""

    @property
    def path(self) -> Any: ...

    def close(self) -> None: ...


class Generation(Built, Protocol):
    """A store opened on a new generation file (``Store`` itself: the constructor is passed in, not imported)."""

    @property
    def conn(self) -> Any: ...


class SqliteLifecycle:
    """A part of ``Store``: the index at ``path``; ``open_generation`` opens a store on a new generation file
    (``Store``), ``reopen`` makes the store follow a swapped-in index."""

    def __init__(self, path: Path, open_generation: Callable[[Path], Generation], reopen: Callable[[], None]) -> None:
        self.path = path
        self.open_generation = open_generation
        self.reopen = reopen

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

    def begin_rebuild(self) -> Generation:
        target = next_generation(self.path)
        fresh = self.open_generation(target)
        try:
            fresh.conn.execute("ATTACH DATABASE ? AS live", (str(live_file(self.path)),))
            with transaction(fresh.conn):
                fresh.conn.execute("INSERT OR IGNORE INTO main.embedding_cache SELECT * FROM live.embedding_cache")
                fresh.conn.execute("INSERT OR IGNORE INTO main.usage SELECT * FROM live.usage")  # not from the files
            fresh.conn.execute("DETACH DATABASE live")
        except BaseException:
            fresh.close()
            remove_database(target)
            raise
        return fresh

    def finish_rebuild(self, built: Built) -> None:
        built.close()
        swap_in(self.path, Path(built.path))
        self.reopen()

    def abandon_rebuild(self, built: Built) -> None:
        built.close()
        remove_database(Path(built.path))


@contextlib.contextmanager
def _file_lock(lock_path: Path, wait: float, index: Path) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=wait)
    except Timeout as exc:
        raise LockError(
            f"another mdmem process is writing {index} (lock {lock_path}); wait for it to finish or stop it"
        ) from exc
    try:
        yield
    finally:
        lock.release()
