"""One open SQLite index, shared by the parts of ``Store`` (keyword search, vector reads and writes, the embedding
cache, the lifecycle): its connection, replaced when the file is reopened; values remembered until the next
commit of any connection; the meta table; a write transaction that forgets what it remembered if it rolls back.

The parts hold this object, not the ``Store``: each reads ``db.conn`` when it runs, so a reopened connection
is the one every part uses at once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mdmem.store.connection import transaction


class SqliteDb:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: Any = None  # set by ``Store`` when it opens the file
        self._memo: dict[str, tuple[tuple[int, int], Any]] = {}
        self._on_reset: list[Callable[[], None]] = []

    def on_reset(self, forget: Callable[[], None]) -> None:
        """Call ``forget`` whenever remembered state must go: a write rolled back, the file reopened."""
        self._on_reset.append(forget)

    def reset(self) -> None:
        self._memo.clear()
        for forget in self._on_reset:
            forget()

    @contextlib.contextmanager
    def tx(self) -> Iterator[None]:
        """A write transaction; remembered values are dropped if it rolls back."""
        try:
            with transaction(self.conn):
                yield
        except BaseException:
            self.reset()
            raise

    def version(self) -> tuple[int, int]:
        """Changes whenever this or another connection commits a change to the index."""
        return (int(self.conn.execute("PRAGMA data_version").fetchone()[0]), self.conn.total_changes)

    def memoised(self, name: str, compute: Callable[[], Any]) -> Any:
        """A value remembered until this or another connection commits a change."""
        key = self.version()
        hit = self._memo.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = compute()
        self._memo[name] = (key, value)
        return value

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value, sort_keys=True)),
        )

    def delete_meta(self, key: str) -> None:
        self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))
