"""Connecting to PostgreSQL: the URL (``store.url`` or ``MDMEMORY_PG_URL``), never printed with its password.

``connect`` opens a connection of its own; ``borrow``/``give_back`` take one from the process's pool for
that URL (psycopg_pool), so that the many short-lived store objects of a long-lived process (a sync
thread, a background catch-up, a rebuild, the service's agents) reuse connections instead of opening new
ones. A store keeps the connection it borrowed for its life: the writer lock is a session advisory lock.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from mdmemory.errors import StoreError
from mdmemory.store.pg import codec
from mdmemory.storeconfig import URL_ENV as URL_ENV
from mdmemory.storeconfig import shown_url as shown_url

POOL_MAX_CONNECTIONS = 64  # per URL and process; a borrower waits this long for one, then fails
POOL_WAIT_SECONDS = 10.0
_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            'store.backend "postgres" needs psycopg: pip install "mdmemory[postgres]"', kind="config"
        ) from exc
    codec.register()
    return psycopg


def _unavailable(url: str, exc: BaseException) -> StoreError:
    text = str(exc).replace(url, shown_url(url)).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    return StoreError(
        f"cannot connect to PostgreSQL at {shown_url(url)}: {detail}; check that the server runs and "
        "memorySearch.store.url (or MDMEMORY_PG_URL) names it",
        kind="unavailable",
    )


def connect(url: str, **kwargs: Any) -> Any:
    """A psycopg connection (autocommit off), or a ``StoreError`` that names the server but not the password."""
    psycopg = _psycopg()
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise _unavailable(url, exc) from None


def _pool(url: str) -> Any:
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            # One direct connection first: a server that is down or a wrong URL fails at once with libpq's
            # reason, where the pool would retry in the background until its timeout.
            connect(url).close()
            from psycopg_pool import ConnectionPool

            pool = ConnectionPool(
                url,
                min_size=0,
                max_size=POOL_MAX_CONNECTIONS,
                open=True,
                name="mdmemory",
                check=ConnectionPool.check_connection,  # a connection the server dropped is replaced, not lent
                reset=_release_locks,
            )
            _pools[url] = pool
        return pool


def _release_locks(conn: Any) -> None:
    """A connection given back holds no advisory lock (a writer lock would outlive its store otherwise)."""
    conn.execute("SELECT pg_advisory_unlock_all()")
    conn.commit()


def borrow(url: str) -> Any:
    """A connection from the process's pool for ``url`` (opened as needed)."""
    psycopg = _psycopg()
    from psycopg_pool import PoolTimeout

    try:
        conn = _pool(url).getconn(timeout=POOL_WAIT_SECONDS)
    except PoolTimeout as exc:
        raise _unavailable(url, exc) from None
    except psycopg.Error as exc:
        raise _unavailable(url, exc) from None
    return conn


def give_back(url: str, conn: Any) -> None:
    """Return a borrowed connection (rolled back first; a broken one is discarded by the pool)."""
    pool = _pools.get(url)
    if pool is None:
        conn.close()
        return
    pool.putconn(conn)


@atexit.register
def close_pools() -> None:
    """Close every pool of this process (their connections and worker threads)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
