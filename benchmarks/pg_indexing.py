"""Indexing throughput on the PostgreSQL store next to SQLite: the same workspace, provider and settings.

Writes the LoCoMo dev workspace (2,760 turns in 119 daily logs), then indexes it from scratch with
mdmem's real pipeline and the shared MiniLM into an SQLite file and into a PostgreSQL 16 + pgvector
started for the run (``pgserver``, a temporary data directory, a Unix socket), alternately, ``--rounds``
times each. The embedding cache is off and the model is loaded once before timing, so every round embeds
every input: the figure compares what each store adds to the same embedding work. Issue 13's bar:
PostgreSQL throughput >= 0.9 x SQLite's.

    python benchmarks/pg_indexing.py [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.locomo import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_MODEL,
    config_tree,
    retriever_settings,
    set_path,
    write_workspace,
)
from mdmem.config.load import load_config  # noqa: E402
from mdmem.memory import Memory  # noqa: E402


def index_once(config: Path, choice: Any) -> tuple[float, dict[str, Any]]:
    """Seconds to index the workspace into the (empty) store ``config`` names, with a loaded provider."""
    cfg = load_config(config)
    with Memory(cfg.agent(), cfg, choice=choice) as mem:
        started = time.perf_counter()
        report = mem.sync()
        return time.perf_counter() - started, report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver's platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="pg-indexing-") as tmp:
        root = Path(tmp)
        os.environ["MDMEMORY_HOME"] = str(root / "home")
        workspace = root / "workspace"
        write_workspace(conversations, workspace)
        server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
        try:
            url = server.get_uri()
            seconds: dict[str, list[float]] = {"sqlite": [], "postgres": []}
            choice = None
            inputs = 0
            for r in range(args.rounds):
                for backend in ("sqlite", "postgres"):
                    tree = config_tree(workspace, args.model.resolve(), retriever_settings("hybrid", "local", []))
                    set_path(tree, "agents.defaults.memorySearch.cache.enabled", False)
                    if backend == "sqlite":
                        store = {"path": str(root / f"index-{r}.sqlite")}
                    else:
                        store = {"backend": "postgres", "url": url, "schema": f"bench_{r}"}
                    set_path(tree, "agents.defaults.memorySearch.store", store)
                    config = root / f"{backend}-{r}.json5"
                    config.write_text(json.dumps(tree), encoding="utf-8")
                    if choice is None:  # load the model once, outside every timing
                        cfg = load_config(config)
                        warm = Memory(cfg.agent(), cfg)
                        choice = warm.choice
                        assert choice.provider is not None
                        choice.provider.load()
                        choice.provider.embed_query("warm-up")
                    took, report = index_once(config, choice)
                    inputs = int(report["embedded"])
                    seconds[backend].append(took)
                    print(f"round {r + 1} {backend:8s} {took:6.1f} s  ({report['chunks']} chunks, {inputs} inputs)")
        finally:
            server.cleanup()
    sqlite, postgres = statistics.median(seconds["sqlite"]), statistics.median(seconds["postgres"])
    ratio = sqlite / postgres
    result = {
        "inputs": inputs,
        "sqlite_seconds": [round(s, 2) for s in seconds["sqlite"]],
        "postgres_seconds": [round(s, 2) for s in seconds["postgres"]],
        "throughput_ratio_postgres_to_sqlite": round(ratio, 3),
    }
    print(f"median: SQLite {sqlite:.1f} s, PostgreSQL {postgres:.1f} s; PostgreSQL throughput {ratio:.2f} x SQLite's")
    print("target >= 0.90: " + ("met" if ratio >= 0.9 else "missed"))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
