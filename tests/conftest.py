"""Shared fixtures. Every test runs with its own MDMEMORY_HOME and no ambient config or API key."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from tests.pg_server import pg, pg_url  # noqa: F401 - fixtures: a real PostgreSQL for the store tests

if TYPE_CHECKING:
    from tests.fleet import Fleet

pytest_plugins = ["tests.conftest_gguf", "tests.fake_openai"]

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MDMEMORY_TEST_SHARED") or REPO.parent / "shared")  # models; a worktree points here
MINILM = SHARED / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One crash-probe cache for the session: each model file is probed once, not once per test."""
    return tmp_path_factory.mktemp("probe-cache")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe_cache: Path) -> Path:
    """Point all state at tmp_path and hide the developer's config, workspace and keys."""
    home = tmp_path / "mdmemory-home"
    monkeypatch.setenv("MDMEMORY_HOME", str(home))
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(probe_cache))
    hidden = ("MDMEMORY_CONFIG", "MDMEMORY_WORKSPACE", "MDMEMORY_REMOTE_AGENTS", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    for var in hidden:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


@pytest.fixture
def no_thread_leaks() -> Iterator[None]:
    """Fail the test if it leaves threads running."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked:
            return
        time.sleep(0.05)
    pytest.fail(f"leaked threads: {[t.name for t in leaked]}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty agent workspace with a memory/ folder."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    return ws


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


BACKENDS = ("sqlite", "postgres")
both_backends = pytest.mark.parametrize("store_backend", BACKENDS, indirect=True)
"""Run a test on each store: ``make_memory`` (and anything using ``store_backend``) gets that store."""


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The ``memorySearch.store`` settings of the store under test: SQLite (``{}``, the default) or, in a
    test marked ``both_backends``, a schema of its own on the test PostgreSQL, dropped after the test."""
    backend = getattr(request, "param", "sqlite")
    if backend == "sqlite":
        yield {}
        return
    url = request.getfixturevalue("pg_url")
    schema = "c_" + uuid.uuid4().hex[:12]
    yield {"backend": "postgres", "url": url, "schema": schema}
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def fleet(tmp_path: Path, store_backend: dict[str, Any]) -> Iterator[Fleet]:
    """An agent's host (its workspace and ``watch``) and service replicas on the store under test
    (tests/fleet.py), stopped after the test."""
    from tests.fleet import Fleet

    f = Fleet(tmp_path, store_backend)
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture
def make_memory(tmp_path: Path, workspace: Path, store_backend: dict[str, Any]) -> Iterator[Callable[..., Memory]]:
    """Build a Memory for ``workspace`` from a real config file; ``provider`` defaults to ``hash``.

    Pass ``memorySearch`` overrides as a dict. With provider ``hash`` the same counting provider instance
    is used so tests can check how much was embedded. The index is on ``store_backend``'s store.
    """
    opened: list[Memory] = []

    def factory(memory_search: dict[str, Any] | None = None, provider: str = "hash", **kw: Any) -> Memory:
        ms = {"provider": provider, **(memory_search or {})}
        ms["store"] = {**store_backend, **ms.get("store", {})}
        cfg_path = tmp_path / f"config-{len(opened)}.json5"
        cfg_path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
        config = load_config(cfg_path)
        agent = config.agent()
        choice = None
        if provider == "hash":
            choice = ProviderChoice(HashEmbeddingProvider(dims=64), "hash")
        mem = Memory(agent, config, choice=choice, **kw)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()
