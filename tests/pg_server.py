"""A real PostgreSQL 16 with pgvector for the tests: ``pgserver`` (a PyPI wheel that bundles both) in a
temporary data directory, on a Unix socket, stopped and deleted when the test session ends."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with warnings.catch_warnings():  # platformdirs warns that XDG_RUNTIME_DIR is unset (root, no session)
        warnings.simplefilter("ignore")
        import pgserver

        data: Path = tmp_path_factory.mktemp("pg") / "data"
        server = pgserver.get_server(data, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
