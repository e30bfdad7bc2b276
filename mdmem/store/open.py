"""Which store holds an agent's index: ``memorySearch.store.backend`` (see ``mdmem.config.store``).

The one place that chooses between the SQLite store and the PostgreSQL one; everything above talks to the
``IndexStore`` it returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mdmem.config.store import URL_ENV, shown_url, url_problem
from mdmem.util.errors import ConfigError

if TYPE_CHECKING:
    from mdmem.config.load import AgentConfig
    from mdmem.store.api import EntryLog, IndexStore


def open_store(agent: AgentConfig, backend: str | None = None) -> IndexStore:
    """Open (creating and migrating as needed) the agent's index on its configured store, or on
    ``backend`` (``sqlite`` or ``postgres``: the target of ``mdmem store migrate``)."""
    settings = agent.memory_search.store
    if (backend or settings.backend) == "postgres":
        from mdmem.store.pg.store import PgStore

        with contextlib.suppress(OSError):  # this host's state files of the agent go there (a read-only
            agent.store_path.parent.mkdir(parents=True, exist_ok=True)  # folder: status computes them instead)
        return PgStore(
            _url(agent),
            agent.id,
            settings.schema,
            max_connections=settings.max_connections,
            hnsw=settings.hnsw,
            workspace=agent.workspace if agent.files_here else None,  # the one workspace the index is for
        )
    from mdmem.store.index import Store

    return Store(agent.store_path, ivf=settings.ivf)


ENTRY_WAIT_SECONDS = 3.0  # for a pooled connection; then one of its own (a retain: 503 after this, not 10 s)


def open_entry_log(agent: AgentConfig) -> EntryLog | None:
    """The agent's retained entries and tombstones on a connection of their own (``close`` gives it back), or
    None when its store keeps none (SQLite: only one host, the one with the files, retains for it)."""
    settings = agent.memory_search.store
    if settings.backend != "postgres":
        return None
    from mdmem.store.pg.connection import borrow, connect
    from mdmem.store.pg.entries import PgEntryLog
    from mdmem.store.pg.schema import check_schema_name, ensure_migrated
    from mdmem.util.errors import StoreError

    url, schema = _url(agent), check_schema_name(settings.schema)
    try:
        log = PgEntryLog(borrow(url, settings.max_connections, ENTRY_WAIT_SECONDS), schema, agent.id, url=url)
    except StoreError:  # after an outage the pool may wait out a backoff: a connection of its own, or the error
        log = PgEntryLog(connect(url), schema, agent.id, url=url, pooled=False)
    try:
        ensure_migrated(log.conn, url, schema)
    except BaseException:
        log.close()
        raise
    return log


def describe(agent: AgentConfig) -> dict[str, Any]:
    """``{backend, store}``: where the index is, for status (a PostgreSQL URL without its password)."""
    settings = agent.memory_search.store
    if settings.backend == "postgres":
        return {"backend": "postgres", "store": f"{shown_url(_url(agent))} (schema {settings.schema})"}
    return {"backend": "sqlite", "store": str(agent.store_path)}


def local_disk(agent: AgentConfig) -> bool:
    """Whether the index lives on this machine's disk (its free space then matters to it)."""
    return agent.memory_search.store.backend != "postgres"


def _url(agent: AgentConfig) -> str:
    """The agent's PostgreSQL URL; the configuration checked it for the postgres backend, a migration
    target of an SQLite agent is checked here."""
    url = agent.memory_search.store.url
    problem = (
        f"missing. Fix: set memorySearch.store.url to a postgresql:// URL, or set the {URL_ENV} environment variable."
        if not url
        else url_problem(url, "memorySearch.store.url or " + URL_ENV)
    )
    if problem is not None or not url:
        raise ConfigError(f"memorySearch.store.url (agent {agent.id!r}): {problem}", key="memorySearch.store.url")
    return url


@contextlib.contextmanager
def entry_log(agent: AgentConfig) -> Iterator[EntryLog | None]:
    """The agent's entries on a connection of their own; a database failure as a ``StoreError`` (503)."""
    from mdmem.store.faults import store_errors, store_fault

    try:
        log = open_entry_log(agent)
        try:
            yield log
        finally:
            if log is not None:
                log.close()
    except store_errors() as exc:
        raise store_fault(exc, agent.store_path) from exc
