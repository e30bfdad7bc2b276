"""A real PostgreSQL 16 with pgvector for the tests: ``pgserver`` (a PyPI wheel that bundles both) in a
temporary data directory, on a Unix socket, stopped and deleted when the test session ends."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

START_ATTEMPTS = 3  # initdb now and then aborts in its post-bootstrap step on a busy machine: start afresh


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset (root, no session)
        warnings.simplefilter("ignore")
        import pgserver

        for attempt in range(1, START_ATTEMPTS + 1):
            data: Path = tmp_path_factory.mktemp("pg") / "data"
            try:
                server = pgserver.get_server(data, cleanup_mode="delete")
                break
            except Exception:
                if attempt == START_ATTEMPTS:
                    raise
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Any, str]]:
    """A connection and a freshly migrated schema of its own, dropped after the test."""
    from mdmem.store.pg.connection import connect
    from mdmem.store.pg.schema import migrate

    conn = connect(pg_url)
    schema = "t_" + uuid.uuid4().hex[:12]
    migrate(conn, schema)
    try:
        yield conn, schema
    finally:
        conn.rollback()
        with conn.transaction():
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()
