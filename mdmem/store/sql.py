"""SQL helpers of the SQLite store shared by its parts (rows, keyword search, vector reads)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlean

SQL_VARS = 900  # stay well under SQLite's bound-parameter limit in IN (...) lists


def batched(items: Sequence[Any], size: int = SQL_VARS) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def rows_in(conn: sqlean.Connection, sql: str, keys: Iterable[Any], params: tuple[Any, ...] = ()) -> Iterator[Any]:
    """Rows of ``sql`` whose ``{marks}`` placeholder becomes ``IN (?, ...)`` over ``keys``, in batches that
    stay under SQLite's bound-parameter limit; ``params`` are bound before the keys."""
    for part in batched(list(dict.fromkeys(keys))):
        yield from conn.execute(sql.format(marks=",".join("?" * len(part))), (*params, *part))
