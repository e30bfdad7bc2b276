"""Keyword search on PostgreSQL at scale: the exact BM25 against the most-terms plan (``mdmem.store.pg.mostterms``).

The notes are ``benchmarks/scale_data.py``'s generated ones (``note(i)``), written through
``PgStore.replace_file`` with their keyword postings and no vectors (the keyword half needs none), 50 chunks
a file, one agent per size (``kw100000``, ``kw1000000``) in a ``pgserver`` PostgreSQL in ``--workdir``
(the same server and settings as ``pg_scale.py``). Steps:

    python benchmarks/pg_keyword.py --workdir DIR load --size 1000000 [--budget 840]
    python benchmarks/pg_keyword.py --workdir DIR compare --size 1000000 [--queries 200] [--k 24]

``compare`` asks the questions the search would (``question(i)``: the search's own terms, frequent ones
dropped as ``Memory.search`` drops them) of the exact BM25 (``keyword.bm25``) and of the most-terms plan
(``mostterms.top_k``), alternating question by question on one connection, then of
``PgStore.keyword_matches`` (the search's path, which picks the plan), and reports each one's p50 / p95,
how many questions the plan answered, and how many of the exact top k its top k holds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pg_scale import SCHEMA, server  # noqa: E402
from benchmarks.scale_data import note, question, write_notes  # noqa: E402


def agent_of(size: int) -> str:
    return f"kw{size}"


def open_store(url: str, size: int) -> Any:
    from mdmem.store.pg.store import PgStore

    return PgStore(url, agent_of(size), SCHEMA)


def load(args: argparse.Namespace) -> None:
    """Write the notes file by file (text and keyword postings, no vectors), resuming where a run stopped."""
    srv = server(args.workdir)
    store = open_store(srv.get_uri(), args.size)
    t0 = time.perf_counter()
    wrote, complete = write_notes(store, args.size, note, None, args.budget)
    if not complete:
        print(f"stopped after {args.budget:.0f} s; run again to go on", flush=True)
        return
    print(f"{args.size} chunks present ({wrote} written now, {wrote / (time.perf_counter() - t0):.0f}/s)")
    store.analyze()
    store.close()


def _p(ms: list[float]) -> str:
    return f"p50 {statistics.median(ms):6.1f} ms  p95 {statistics.quantiles(ms, n=20)[18]:6.1f} ms"


def search_terms(store: Any, text: str) -> list[str]:
    """The keyword terms ``Memory.search`` asks the store for: the query's, less those in more than
    ``PRUNE_FRACTION`` of the chunks (``search.hybrid``)."""
    from mdmem.search.hybrid import PRUNE_FRACTION
    from mdmem.search.query import keyword_query, query_terms

    words = [w for w in keyword_query(text, query_terms(text)) if w and " " not in w]
    limit = int(store.chunk_count() * PRUNE_FRACTION)
    rare = [w for w in words if store.term_frequency_at_least(w, limit) < limit]
    return rare or words


def compare(args: argparse.Namespace) -> None:
    """The exact and the most-terms top k of the same questions, alternating, on one connection (same totals
    and document frequencies); then ``PgStore.keyword_matches``, the search's path."""
    from mdmem.store.pg import keyword, mostterms

    srv = server(args.workdir)
    store = open_store(srv.get_uri(), args.size)
    asked = [search_terms(store, question(i)) for i in range(args.queries + args.warm)]
    exact_ms: list[float] = []
    plan_ms: list[float] = []
    store_ms: list[float] = []
    overlap, same_order, fell_back, postings = 0, 0, 0, 0
    with store.session() as conn, conn.cursor() as cur:
        known = keyword.totals(cur, SCHEMA, store.agent_id, store.gen)
        for n, words in enumerate(asked):
            terms = keyword.query_terms(words)
            df = {t: store.term_frequency_at_least(t, known.chunks + 1) for t in terms}
            order = [("exact", keyword.bm25), ("plan", mostterms.top_k)]
            timed: dict[str, float] = {}
            got: dict[str, Any] = {}
            for name, run in order if n % 2 else order[::-1]:
                t0 = time.perf_counter()
                got[name] = run(cur, SCHEMA, store.agent_id, store.gen, terms, args.k, known, df)
                timed[name] = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            store.keyword_matches(words, args.k)
            timed["store"] = (time.perf_counter() - t0) * 1000
            if n < args.warm:
                continue
            exact_ms.append(timed["exact"])
            plan_ms.append(timed["plan"])
            store_ms.append(timed["store"])
            postings += sum(df.values())
            if got["plan"] is None:
                fell_back += 1
                got["plan"] = got["exact"]
            ids = [[c for c, _, _ in got[x]] for x in ("exact", "plan")]
            overlap += len(set(ids[0]) & set(ids[1]))
            same_order += ids[0] == ids[1]
    q = args.queries
    print(f"{args.size:,} chunks, {q} questions, k {args.k}, {postings / q:,.0f} postings a question on average")
    print(f"exact BM25 (keyword.bm25):      {_p(exact_ms)}")
    print(f"most terms (mostterms.top_k):   {_p(plan_ms)}  ({fell_back} declined, timed until they did)")
    print(f"PgStore.keyword_matches:        {_p(store_ms)}")
    share = overlap / (q * args.k)
    print(f"its top {args.k} holds {share:.4f} of the exact top {args.k}; same order in {same_order}/{q}")
    store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("load")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--budget", type=float, default=3600.0)
    p = sub.add_parser("compare")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warm", type=int, default=50)
    p.add_argument("--k", type=int, default=24)
    args = ap.parse_args()
    {"load": load, "compare": compare}[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
