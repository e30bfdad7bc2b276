"""The measurements of benchmarks/ten_year.py: files hashed, the uses the stream left, the index's size, and
R@5/MRR, search times and pack tokens of the questions on one Memory."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from locomo import score
from pack_latency import memoise_queries, percentile
from ten_year_world import Question

from mdmem.files.archive import is_archived, live_path
from mdmem.memory import Memory
from mdmem.util.tokens import estimate_tokens


def hashes(workspace: Path) -> dict[str, tuple[str, float]]:
    """Every file under the workspace, by its path as it would be live: (sha256, mtime)."""
    out = {}
    for p in sorted(workspace.rglob("*.md")):
        rel = p.relative_to(workspace).as_posix()
        out[live_path(rel) or rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime)
    return out


def last_uses(mem: Memory) -> tuple[dict[str, float], dict[str, int]]:
    last: dict[str, float] = {}
    uses: dict[str, int] = {}
    for r in mem.store.usage_rows():
        last[r.path] = max(last.get(r.path, 0.0), r.last_used_at)
        uses[r.path] = uses.get(r.path, 0) + r.uses
    return last, uses


def index_size(mem: Memory, store: Path) -> dict[str, int]:
    """Files and chunks indexed, in the default scope and in all; the SQLite file's bytes after a WAL checkpoint
    (``bytes``) and the bytes of its pages in use (``bytesInUse``: without the free pages moves leave)."""
    files = mem.store.files()
    chunks = {p: len(mem.store.chunks_of(p)) for p in files}
    real = store.resolve()
    with tempfile.TemporaryDirectory(prefix="mdm-ten-year-size-") as tmp:
        # a copy: another SQLite library in this process must not open (and close) the live file, whose locks
        # are the process's, not the connection's (POSIX)
        snap = Path(tmp) / "snap.sqlite"
        for suffix in ("", "-wal"):
            if Path(f"{real}{suffix}").exists():
                shutil.copyfile(f"{real}{suffix}", f"{snap}{suffix}")
        with contextlib.closing(sqlite3.connect(snap)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page, pages, free = (
                db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count", "freelist_count")
            )
        size = snap.stat().st_size
    return {
        "files": len(files),
        "filesInScope": sum(not is_archived(p) for p in files),
        "chunks": sum(chunks.values()),
        "chunksInScope": sum(n for p, n in chunks.items() if not is_archived(p)),
        "bytes": size,
        "bytesInUse": (pages - free) * page,
    }


def measure(
    mem: Memory,
    sets: dict[str, list[Question]],
    args: argparse.Namespace,
    cold: Callable[[str], str],
    *,
    include_archive: bool = False,
    timed: bool = True,
) -> dict[str, Any]:
    """R@5/MRR by set and group, the result lists, search p50/p95, the pack tokens and where they come from."""
    texts = [q.text for qs in sets.values() for q in qs]
    memoise_queries(mem, texts)
    mem.search(texts[0], include_archive=include_archive)  # warm: the index opened, caches filled
    out: dict[str, Any] = {"recall": {}, "results": {}}
    times: list[float] = []
    for name, qs in sets.items():
        rows: dict[str, list[dict[str, float]]] = {}
        for q in qs:
            found = mem.search(q.text, max_results=10, min_score=0.0, include_archive=include_archive)["results"]
            ranges = [(live_path(r["path"]) or r["path"], r["startLine"], r["endLine"]) for r in found]
            s = score(ranges, q.gold)
            for group in (q.group, "kept" if q.group != "dormant" else "", "all"):
                if group:
                    rows.setdefault(group, []).append(s)
            out["results"][f"{name}:{q.text}"] = [(r["path"], r["startLine"], r["endLine"], r["score"]) for r in found]
            out.setdefault("scores", {})[f"{name}:{q.group}:{q.text}"] = s["r@5"]
        out["recall"][name] = {
            g: {"n": len(v), "r@5": round(statistics.fmean(x["r@5"] for x in v), 3), "mrr": round(
                statistics.fmean(x["mrr"] for x in v), 3)}
            for g, v in sorted(rows.items())
        }  # fmt: skip
    for _ in range(args.rounds if timed else 0):
        for q in texts:
            t0 = time.perf_counter()
            mem.search(q, max_results=10, min_score=0.0, include_archive=include_archive)
            times.append(1000 * (time.perf_counter() - t0))
    if times:
        out["searchMs"] = {"p50": round(percentile(times, 0.5), 2), "p95": round(percentile(times, 0.95), 2)}
    tokens = {"total": 0, "offEvidence": 0, "cold": 0, "neverUsed": 0, "goldLines": 0, "goldInPack": 0}
    for q in [q for qs in sets.values() for q in qs]:
        items = mem.pack(q.text, budget_tokens=args.budget, include_archive=include_archive)["items"]
        gold_files = {p for p, _ in q.gold}
        for it in items:
            n = estimate_tokens(it["text"])
            path = live_path(it["path"]) or it["path"]
            tokens["total"] += n
            tokens["offEvidence"] += n * (path not in gold_files)
            state = cold(path)
            tokens["cold"] += n * (state != "warm")
            tokens["neverUsed"] += n * (state == "never")
        tokens["goldLines"] += len(q.gold)
        tokens["goldInPack"] += sum(
            any((live_path(it["path"]) or it["path"]) == p and it["startLine"] <= ln <= it["endLine"] for it in items)
            for p, ln in q.gold
        )
    out["pack"] = tokens
    return out
