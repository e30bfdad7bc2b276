"""``mdmem store migrate``: an agent's index copied from SQLite to PostgreSQL and back, vectors, pending
chunks and embedding cache included, nothing embedded again, every search answering as before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.cli.commands import main
from mdmem.memory import Memory
from tests.conftest import write

QUERIES = ["heron pond", "restic backups", "what does Dana drink", "dinner harbour", "kingfisher2 word3x5"]
on_postgres = pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)


def seed(workspace: Path) -> None:
    write(workspace / "MEMORY.md", "# Preferences\n\n- Dana prefers green tea, no sugar.\n")
    lines = ["The heron waded in the pond.", "Backups run nightly with restic.", "Dinner with Mika at the harbour."]
    for day, line in enumerate(lines):
        write(workspace / "memory" / f"2026-05-0{day + 1}.md", f"# 2026-05-0{day + 1}\n\n{line}\n")
    lines = [" ".join(f"kingfisher{i} word{j}x{k}" for k in range(12)) for i in range(4) for j in range(8)]
    long = "# Birds\n\n" + "\n".join(lines) + "\n"
    write(workspace / "memory" / "2026-05-09.md", long)  # a chunk with windows: several vectors each


def answers(mem: Memory) -> list[list[tuple[str, int, int, float]]]:
    out = []
    for q in QUERIES:
        found = mem.search(q, min_score=0.0)
        assert found["mode"] == "hybrid", found
        hits = [(r["path"], r["startLine"], r["endLine"], round(r["score"], 4)) for r in found["results"]]
        out.append(sorted(hits, key=lambda h: (-h[3], h)))  # the order of equal scores is no part of the contract
    return out


def migrate(tmp_path: Path, config: int, to: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(["store", "migrate", "--to", to, "--json", "--config", str(tmp_path / f"config-{config}.json5")])
    out = capsys.readouterr().out
    assert code == 0, out
    return dict(json.loads(out))


@on_postgres
def test_sqlite_to_postgres_and_back_answers_the_same_without_embedding(
    workspace: Path,
    make_memory: Callable[..., Memory],
    store_backend: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed(workspace)
    lite = make_memory({"store": {**store_backend, "backend": "sqlite"}})  # config-0: the url is there, unused
    lite.sync()
    before = answers(lite)
    counts = lite.store.counts()
    assert counts["vectors"] > counts["chunks"]  # windows too
    lite.close()

    copied = migrate(tmp_path, 0, "postgres", capsys)
    assert {k: copied[k] for k in ("files", "chunks", "vectors", "cacheEntries")} == counts | {"files": 5}
    assert copied["from"]["backend"] == "sqlite" and copied["to"]["backend"] == "postgres"
    assert "backend" in copied["next"] and "postgres" in copied["to"]["store"]

    pg = make_memory()  # config-1: postgres
    assert pg.status()["backend"] == "postgres"
    assert answers(pg) == before
    provider = pg.choice.provider
    assert provider is not None
    calls = provider.calls
    report = pg.sync()
    assert (report["indexed"], report["embedded"], provider.calls) == (0, 0, calls)  # nothing embedded again
    pg.close()

    (workspace / "memory" / "2026-05-01.md").write_text("# 2026-05-01\n\nThe heron left the pond.\n")
    edited = make_memory()  # config-2: postgres; the edit is indexed there, then copied back
    edited.sync()
    after_edit = answers(edited)
    edited.close()
    back = migrate(tmp_path, 2, "sqlite", capsys)
    assert back["to"]["backend"] == "sqlite" and back["files"] == 5 and back["pending"] == 0
    lite_again = make_memory({"store": {**store_backend, "backend": "sqlite"}})
    assert answers(lite_again) == after_edit
    assert lite_again.sync()["embedded"] == 0


@on_postgres
def test_postgres_to_sqlite_keeps_pending_chunks_pending(
    workspace: Path,
    make_memory: Callable[..., Memory],
    store_backend: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed(workspace)
    pg = make_memory()  # config-0: postgres
    pg.sync(embed=False)  # text only: every chunk waits for its vectors
    pending = pg.store.pending_count()
    assert pending > 0
    pg.close()
    copied = migrate(tmp_path, 0, "sqlite", capsys)
    assert copied["pending"] == pending and copied["vectors"] == 0
    lite = make_memory({"store": {**store_backend, "backend": "sqlite"}})
    assert lite.store.pending_count() == pending
    assert lite.search("restic", min_score=0.0)["results"][0]["path"] == "memory/2026-05-02.md"


@on_postgres
def test_migrate_refuses_to_copy_what_is_not_there(
    make_memory: Callable[..., Memory],
    store_backend: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_memory({"store": {**store_backend, "backend": "sqlite"}})  # config-0: never indexed
    code = main(["store", "migrate", "--to", "postgres", "--config", str(tmp_path / "config-0.json5")])
    assert code == 2 and "no SQLite index" in capsys.readouterr().err
    make_memory()  # config-1: postgres, empty
    code = main(["store", "migrate", "--to", "sqlite", "--config", str(tmp_path / "config-1.json5")])
    assert code == 1 and "is empty: nothing to copy" in capsys.readouterr().err
