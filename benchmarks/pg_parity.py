"""LoCoMo retrieval on the PostgreSQL store next to the SQLite one: the same index, the same questions.

Builds (or reuses, with ``--workdir``) the LoCoMo dev index with mdmem's real pipeline and the shared
MiniLM, copies it into a PostgreSQL 16 + pgvector started for the run (``pgserver``, a temporary data
directory) with ``store.copy.copy_index`` (no re-embedding), then asks every question of both
stores through the same search (``mdmem.search.hybrid.search``: hybrid fusion, keyword scoring and minScore
rule as configured) with the same query vector, and prints recall@1/5/10 and MRR side by side with the
search time per question. Issue 13's bar: R@5 and MRR within 0.02 of SQLite.

    python benchmarks/pg_parity.py [--workdir DIR] [--retriever hybrid|keyword] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.locomo import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_MODEL,
    MAX_RESULTS,
    SCORED,
    build_questions,
    config_tree,
    index_key,
    retriever_settings,
    score,
    set_path,
    write_workspace,
)
from mdmem.memory import Memory  # noqa: E402
from mdmem.search.hybrid import search  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--retriever", choices=["hybrid", "keyword"], default="hybrid")
    ap.add_argument("--workdir", type=Path, help="keep the workspace and SQLite index here (reused by later runs)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver's platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

    from mdmem.store.copy import copy_index
    from mdmem.store.pg.store import PgStore

    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="pg-parity-") as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        workspace = root / "workspace"
        questions = build_questions(conversations, write_workspace(conversations, workspace), None).questions
        tree = config_tree(workspace, args.model.resolve(), retriever_settings(args.retriever, "local", []))
        key = index_key(tree)
        store_path = root / f"index-{hashlib.sha1(key.encode()).hexdigest()[:10]}.sqlite"
        set_path(tree, "agents.defaults.memorySearch.store.path", str(store_path))
        config = root / f"{args.retriever}.json5"
        config.write_text(json.dumps(tree, indent=2), encoding="utf-8")
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="delete")
        try:
            with Memory.open(config_path=config) as mem, PgStore(server.get_uri(), "locomo") as pg:
                mem.sync()
                started = time.perf_counter()
                counts = copy_index(mem.store, pg)
                copy_seconds = time.perf_counter() - started
                provider = mem.choice.provider
                q = mem.settings.query
                figures: dict[str, dict[str, float]] = {}
                for name, store in (("sqlite", mem.store), ("postgres", pg)):
                    rows, seconds = [], 0.0
                    for question in questions:
                        vector = provider.embed_query(question.text) if provider is not None else None
                        started = time.perf_counter()
                        outcome = search(
                            store,
                            question.text,
                            query_vector=vector,
                            max_results=MAX_RESULTS,
                            min_score=0.0,
                            hybrid=q.hybrid,
                            keyword_score=q.keyword_score,
                            low_confidence_results=q.low_confidence_results,
                        )
                        seconds += time.perf_counter() - started
                        ranges = [(h.chunk.path, h.chunk.start_line, h.chunk.end_line) for h in outcome.hits]
                        if question.category in SCORED:
                            rows.append(score(ranges, question.gold))
                    figures[name] = {m: round(statistics.fmean(r[m] for r in rows), 3) for m in rows[0]}
                    figures[name]["msPerQuestion"] = round(1000 * seconds / len(questions), 2)
        finally:
            server.cleanup()
    report = {"retriever": args.retriever, "questions": len(rows), "copied": counts}
    report |= {"copySeconds": round(copy_seconds, 1), **figures}
    print(f"copied {counts} in {copy_seconds:.1f} s; {len(rows)} questions (categories 1-4), {args.retriever}")
    print(f"{'store':10} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} {'ms/q':>7}")
    for name, f in figures.items():
        print(f"{name:10} {f['r@1']:6.3f} {f['r@5']:6.3f} {f['r@10']:6.3f} {f['mrr']:6.3f} {f['msPerQuestion']:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
