"""Connecting to PostgreSQL: the URL (``store.url`` or ``MDMEMORY_PG_URL``), never printed with its password.

``connect`` opens a connection of its own. Stores never keep one: ``session`` lends a thread a connection
from the process's pool for that URL (psycopg_pool, at most ``store.maxConnections``) for a block of work
and takes it back after, so a process serving hundreds of agents holds as many connections as it has
operations running, not one per agent or per reader. Blocks nest: a thread that holds a connection for a
URL (a writer holding the agent's advisory lock, a rebuild) uses that one for everything it does meanwhile,
so a thread never waits for a second connection and the pool cannot deadlock.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from mdmem.config.store import URL_ENV as URL_ENV
from mdmem.config.store import shown_url as shown_url
from mdmem.store.pg import codec
from mdmem.util.errors import StoreError

DEFAULT_MAX_CONNECTIONS = 16  # per URL and process (store.maxConnections); a borrower waits this long, then fails
POOL_WAIT_SECONDS = 10.0
WORK_MEM = "32MB"  # per sort or hash of a query on a pooled connection (see _configure)
CHECK_AFTER_IDLE_SECONDS = 5.0  # a connection idle longer is checked before it is lent (see borrow)
SPARE_WAIT_SECONDS = 0.5  # what a spare connection may wait for (one idle, or the pool growing by one)
_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()
_given_back: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()  # connection -> when
_lost_one: dict[str, float] = {}  # url -> when a connection to it came back broken
_held = threading.local()  # url -> [connection, depth, advisory locks taken] this thread holds (see session)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            'store.backend "postgres" needs psycopg: pip install "mdmem[postgres]"', kind="config"
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


def _pool(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Any:
    """The process's pool for ``url``; the first caller's ``max_connections`` sizes it."""
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
                max_size=max_connections,
                open=True,
                name="mdmemory",
                configure=_configure,
            )
            _pools[url] = pool
        return pool


def _configure(conn: Any) -> None:
    """Pooled connections run in autocommit: a read is one round trip (no BEGIN, no COMMIT); what must be
    atomic runs in ``conn.transaction()``. ``work_mem`` of ``WORK_MEM``: a keyword search over frequent
    terms groups tens of thousands of postings by chunk, which spilled to disk at the default 4 MB."""
    conn.autocommit = True
    conn.execute(f"SET work_mem = '{WORK_MEM}'")


def borrow(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS, wait: float = POOL_WAIT_SECONDS) -> Any:
    """A connection from the process's pool for ``url`` (opened as needed), waiting ``wait`` seconds at most
    (for a free one, or for the server to answer again). One idle for more than ``CHECK_AFTER_IDLE_SECONDS``
    is checked before it is lent (one empty query): one the server dropped meanwhile (a restart, a failover)
    is discarded and the next tried at once (the pool's own check backs off for a second, then two... per
    dead one). So is every one given back before a connection came back broken. A connection dropped while
    in use fails that operation."""
    psycopg = _psycopg()
    from psycopg_pool import ConnectionPool, PoolTimeout

    pool = _pool(url, max_connections)
    for _ in range(max_connections + 1):
        try:
            conn = pool.getconn(timeout=wait)
        except (PoolTimeout, psycopg.Error) as exc:
            raise _unavailable(url, exc) from None
        back = _given_back.get(conn, 0.0)
        if time.monotonic() - back < CHECK_AFTER_IDLE_SECONDS and back > _lost_one.get(url, 0.0):
            return conn
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            conn.close()
            pool.putconn(conn)  # a closed connection is dropped from the pool, which opens others as needed
            continue
        return conn
    raise _unavailable(url, RuntimeError("every connection the pool lent was closed by the server"))


def give_back(url: str, conn: Any) -> None:
    """Return a borrowed connection (rolled back first; a broken one is discarded by the pool)."""
    pool = _pools.get(url)
    if pool is None:
        conn.close()
        return
    _given_back[conn] = time.monotonic()
    if conn.broken or conn.closed:  # the server may have dropped the others too: check them before use
        _lost_one[url] = time.monotonic()
    pool.putconn(conn)


def spare(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Any | None:
    """A connection for work this thread hands to another thread (a search's vector half), only when one is
    at hand: idle in the pool, or the pool below its size with nobody waiting; else None. It never waits
    behind other borrowers, so it cannot deadlock a thread that holds a connection already. Give it back
    with ``give_back``."""
    pool = _pools.get(url)
    if pool is None:
        return None
    stats = pool.get_stats()
    if stats.get("requests_waiting", 0) or (
        not stats.get("pool_available", 0) and stats.get("pool_size", 0) >= pool.max_size
    ):
        return None
    try:
        return borrow(url, max_connections, wait=SPARE_WAIT_SECONDS)
    except StoreError:
        return None


@contextlib.contextmanager
def session(url: str, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Iterator[Any]:
    """A connection for this thread's block of work: the one it holds for ``url`` already (an outer block),
    else one borrowed from the pool and given back (rolled back, advisory locks released) at the end."""
    held: dict[str, list[Any]] = _held.__dict__.setdefault("conns", {})
    entry = held.get(url)
    if entry is not None:
        entry[1] += 1
        try:
            yield entry[0]
        finally:
            entry[1] -= 1
        return
    conn = borrow(url, max_connections)
    entry = held[url] = [conn, 1, set()]
    try:
        yield conn
    finally:
        del held[url]
        if entry[2]:  # advisory locks a block that failed mid-way left held: never lend them on
            try:
                conn.rollback()
                conn.execute("SELECT pg_advisory_unlock_all()")
            except Exception:
                conn.close()  # the pool drops it; the locks end with its server session
        give_back(url, conn)


def current(url: str) -> Any | None:
    """The connection this thread holds for ``url`` (inside ``session``), if any."""
    entry = _held.__dict__.get("conns", {}).get(url)
    return None if entry is None else entry[0]


def try_lock(url: str, key: int) -> bool:
    """Take session advisory lock ``key`` on the connection this thread holds for ``url``, without waiting.
    PostgreSQL lets a session take a lock it holds again; two stores of one thread share a connection, so
    a lock this thread holds already counts as taken by another (a second writer of an agent waits)."""
    entry = _held.__dict__["conns"][url]
    if key in entry[2]:
        return False
    got = bool(entry[0].execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])
    if got:
        entry[2].add(key)
    return got


def unlock(url: str, key: int) -> None:
    """Release what ``try_lock`` took."""
    entry = _held.__dict__["conns"][url]
    entry[2].discard(key)
    entry[0].execute("SELECT pg_advisory_unlock(%s)", (key,))


@atexit.register
def close_pools() -> None:
    """Close every pool of this process (their connections and worker threads)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


_P = ParamSpec("_P")
_R = TypeVar("_R")
_B = TypeVar("_B", bound="HasSession")


def session_connection(url: str) -> Any:
    """The connection of the ``session`` block this thread is in for ``url``; RuntimeError outside one."""
    conn = current(url)
    if conn is None:
        raise RuntimeError("no connection outside a store session: use `with store.session():`")
    return conn


class HasSession(Protocol):
    """Anything that can hold a connection for a block (a store, its parts, an entry log)."""

    def session(self) -> contextlib.AbstractContextManager[Any]: ...


class Borrowing:
    """What a store object needs to use the pool: ``url``, ``max_connections``; ``conn`` is the connection
    of the block it is in (``session``)."""

    url: str
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Hold one connection for a series of calls (each call borrows one otherwise)."""
        return session(self.url, self.max_connections)

    @property
    def conn(self) -> Any:
        return session_connection(self.url)


def borrows(method: Callable[Concatenate[_B, _P], _R]) -> Callable[Concatenate[_B, _P], _R]:
    """Run a store method in a ``session`` (its own, or the one its thread is in)."""

    @functools.wraps(method)
    def run(self: _B, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.session():
            return method(self, *args, **kwargs)

    return run
