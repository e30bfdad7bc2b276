"""Safe reindex: a new index beside the live one (a database file, or a PostgreSQL generation), switched in
at once, and nothing lost on failure. The file checks are the SQLite store's; the rest runs on both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from mdmem.store import Store
from mdmem.store.open import open_store
from mdmem.util.errors import EmbeddingsPending, ProviderError
from tests.conftest import REPO, both_backends, write


def leftovers(store_path: Path) -> list[str]:
    """Database files beside the store path (not the lock, the health or the breaker file, which stay by design)."""
    names = (p.name for p in store_path.parent.iterdir() if p.name != store_path.name)
    return sorted(n for n in names if not n.endswith((".lock", ".health.json", ".breaker.json")))


@pytest.fixture
def notes(workspace: Path) -> Path:
    for i in range(6):
        write(workspace / "memory" / f"2026-04-0{i + 1}.md", f"# Day {i}\n\nThe heron number {i} waded.\n")
    return workspace


@both_backends
def test_provider_change_rebuilds_once_and_swaps_atomically(notes: Path, make_memory: Callable[..., Memory]) -> None:
    first = make_memory()
    first.sync()
    on_sqlite = isinstance(first.store, Store)
    reader = open_store(first.agent)  # another process's connection, open across the swap
    index = lambda: {k: v for k, v in reader.counts().items() if k != "cacheEntries"}  # noqa: E731 - PostgreSQL's
    before = index()  # cache is the agent's, not a generation's: the rebuild adds to it where the reader sees it
    second = make_memory(memory_search={"provider": "hash"})
    second.engine.providers.adopt(ProviderChoice(HashEmbeddingProvider(dims=32), "hash"))  # new dims -> new identity
    report = second.sync()
    assert report["rebuilt"] is True and report["indexed"] == 6
    assert index() == before  # the old connection still sees a complete index
    assert reader.refresh() is True
    assert reader.vec_dims() == 32 and reader.counts()["chunks"] == before["chunks"]
    reader.close()
    assert second.sync()["rebuilt"] is False  # one rebuild, not a storm
    if not on_sqlite:
        return
    path = Path(first.store.path)
    assert path.is_symlink() and os.readlink(path).startswith(path.name + ".g")
    names = leftovers(path)
    assert all(n.startswith(os.readlink(path)) for n in names), names  # only the live generation remains
    second.close()
    third = make_memory(memory_search={"chunking": {"tokens": 64, "overlap": 8}})
    third.sync()
    assert [n for n in leftovers(path) if not n.startswith(os.readlink(path))] == []


class FailingProvider(HashEmbeddingProvider):
    def __init__(self, fail_after: int, dims: int = 48) -> None:
        super().__init__(dims=dims)
        self.fail_after = fail_after

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if self.calls >= self.fail_after:
            raise ProviderError("simulated outage")
        return super().embed_batch(texts)


@both_backends
def test_failed_forced_rebuild_keeps_the_old_index_and_leaves_no_files(
    notes: Path, make_memory: Callable[..., Memory]
) -> None:
    no_cache = {"cache": {"enabled": False}}  # a forced rebuild would otherwise reuse every cached vector
    first = make_memory(no_cache)
    first.sync()
    on_sqlite, path = isinstance(first.store, Store), Path(first.store.path)
    before = first.search("heron")
    assert before["mode"] == "hybrid"
    first.close()
    broken = make_memory(no_cache)
    broken.engine.providers.adopt(
        ProviderChoice(FailingProvider(fail_after=0, dims=64), "hash")
    )  # same identity, outage
    with pytest.raises(ProviderError, match="simulated outage.*rebuild .* was discarded"):
        broken.sync(force=True)
    if on_sqlite:
        assert leftovers(path) == [] or all(n.startswith(path.name + "-") for n in leftovers(path))
        assert not path.is_symlink()
    again = make_memory()
    assert again.search("heron") == before  # the live index, vectors and all, still answers


@both_backends
def test_identity_change_during_an_outage_swaps_in_the_text_and_embeds_later(
    notes: Path, make_memory: Callable[..., Memory], workspace: Path
) -> None:
    first = make_memory()
    first.sync()
    on_sqlite, path = isinstance(first.store, Store), Path(first.store.path)
    first.close()
    write(workspace / "memory" / "2026-04-09.md", "# Day 9\n\nThe kingfisher dived twice.\n")
    provider = FailingProvider(fail_after=0)  # 48 dims: a new identity, and the provider is down
    mem = make_memory({"breaker": {"coolDownSeconds": 1, "maxCoolDownSeconds": 1}})  # paused only briefly
    mem.engine.providers.adopt(ProviderChoice(provider, "hash"))
    with pytest.raises(EmbeddingsPending) as failed:
        mem.sync()
    assert failed.value.report["rebuilt"] is True and failed.value.pending == mem.store.counts()["chunks"] == 7
    assert path.is_symlink() or not on_sqlite  # the old index was for another identity: its vectors could not serve
    status = mem.status()
    assert status["pendingEmbeddings"] == 7 and status["vectors"] == 0
    assert "simulated outage" in status["lastError"]["error"]
    found = mem.search("kingfisher")  # the query cannot be embedded either: keywords answer
    assert found["mode"] == "keyword" and found["results"][0]["path"] == "memory/2026-04-09.md"
    notes = " ".join(found["warnings"])
    assert "answered from keywords only" in notes and "7 chunk(s) are not embedded yet" in notes
    assert "being embedded by a background sync in this process" in notes
    provider.fail_after = 10**6  # the provider is back
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            report = mem.sync()
        except EmbeddingsPending:  # the breaker's pause after the outage has not ended yet
            report = {"pending": -1}
        if report["pending"] == 0:
            break
        time.sleep(0.1)  # or the background sync this search started holds the embedding lock
    assert report["rebuilt"] is False and report["pending"] == 0
    status = mem.status()
    assert status["pendingEmbeddings"] == 0 and status["vectors"] == 7 and status["lastError"] is None


SLOW_REBUILD = r"""
import sys, time
from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider

class Slow(HashEmbeddingProvider):
    def embed_batch(self, texts):
        open(sys.argv[2], "w").close()
        time.sleep(5)  # killed during this
        return super().embed_batch(texts)

agent = load_config(sys.argv[1]).agent()
mem = Memory(agent, choice=ProviderChoice(Slow(dims=40), "hash"))
mem.sync()
"""


def test_killed_rebuild_leaves_the_old_index_searchable(
    notes: Path, make_memory: Callable[..., Memory], tmp_path: Path
) -> None:
    first = make_memory()
    first.sync()
    path = first.store.path
    expected = first.search("heron number 3")["results"]
    first.close()
    script = tmp_path / "slow.py"
    script.write_text(SLOW_REBUILD)
    started = tmp_path / "embedding-started"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "config-0.json5"), str(started)], cwd=REPO, env=os.environ.copy()
    )
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert any(".g" in n for n in leftovers(path))  # it was killed midway through writing the new index
    assert not path.is_symlink()  # before the swap
    survivor = make_memory()
    assert survivor.search("heron number 3")["results"] == expected
    survivor.sync()  # the next writer removes the dead rebuild's files
    assert not any(".g" in n for n in leftovers(path))
