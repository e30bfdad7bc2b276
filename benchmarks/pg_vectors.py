"""Vector search on the PostgreSQL store at scale: HNSW latency and recall of the exact top-k per ef_search.

Starts a PostgreSQL 16 + pgvector for the run (``pgserver``, a temporary data directory), writes ``--vectors``
clustered unit vectors (``--dims``, one per chunk) for one agent, builds the agent generation's HNSW index
(``store.pg.vectors.ensure_index``: after the load, as a rebuild would), then for each ``ef_search`` runs
``--queries`` KNN queries (k = 10 and the 120 of a context pack's net) through ``store.pg.vectors.knn`` and
prints p50 / p95 latency and recall of the exact top-k (numpy over all vectors). Random vectors around many
centres in 384 dimensions are close to the hardest case for HNSW (real sentence embeddings have far more
structure), so the recall here is a floor.

    python benchmarks/pg_vectors.py [--vectors 100000] [--dims 384] [--queries 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.store.pg import codec, vectors  # noqa: E402
from mdmem.store.pg.connection import connect  # noqa: E402
from mdmem.store.pg.schema import migrate  # noqa: E402

AGENT, GEN, SCHEMA = "bench", 1, "mdmem"
EF_SEARCH = (40, 100, 200, 400, 800)
KS = (10, 120)


def clustered(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    centres = rng.normal(size=(max(16, n // 500), dims)).astype(np.float32)
    out = centres[rng.integers(0, len(centres), size=n)] + rng.normal(scale=0.6, size=(n, dims)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def load(conn: object, data: np.ndarray) -> float:
    """Chunks and vectors by COPY, then the HNSW index; returns the index build time in seconds."""
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        with cur.copy(
            f"COPY {SCHEMA}.chunks (id, agent_id, gen, path, source, start_line, end_line, hash, embed_hash, text, "
            "tokens) FROM STDIN"
        ) as copy:
            for i in range(len(data)):
                copy.write_row((i + 1, AGENT, GEN, f"memory/{i // 50}.md", "memory", 1, 1, "h", "e", "t", 1))
        with cur.copy(f"COPY {SCHEMA}.vectors (agent_id, gen, chunk_id, hash, dims, embedding) FROM STDIN") as copy:
            for i, v in enumerate(data):
                copy.write_row((AGENT, GEN, i + 1, "h", len(v), codec.literal(v)))
    conn.commit()  # type: ignore[attr-defined]
    started = time.perf_counter()
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SET maintenance_work_mem = '1GB'")
        vectors.ensure_index(cur, SCHEMA, AGENT, GEN, data.shape[1])
        cur.execute(f"ANALYZE {SCHEMA}.vectors")
    conn.commit()  # type: ignore[attr-defined]
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=100_000)
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver's platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

    rng = np.random.default_rng(17)
    data = clustered(rng, args.vectors, args.dims)
    queries = data[rng.integers(0, len(data), size=args.queries)] + rng.normal(
        scale=0.2, size=(args.queries, args.dims)
    ).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    truth = {k: [set((np.argsort(-(data @ q))[:k] + 1).tolist()) for q in queries] for k in KS}
    report: dict[str, object] = {"machine": platform.processor() or platform.machine(), "vectors": args.vectors}
    with tempfile.TemporaryDirectory(prefix="pg-vectors-") as tmp:
        server = pgserver.get_server(Path(tmp) / "data", cleanup_mode="delete")
        try:
            conn = connect(server.get_uri())
            migrate(conn, SCHEMA)
            started = time.perf_counter()
            build = load(conn, data)
            report["loadSeconds"] = round(time.perf_counter() - started - build, 1)
            report["indexSeconds"] = round(build, 1)
            print(f"{args.vectors} x {args.dims}: loaded in {report['loadSeconds']} s, HNSW built in {build:.1f} s")
            rows = []
            for ef in EF_SEARCH:
                for k in KS:
                    times, hits = [], 0
                    with conn.cursor() as cur:
                        for q, gold in zip(queries, truth[k], strict=True):
                            t = time.perf_counter()
                            got = vectors.knn(cur, SCHEMA, AGENT, GEN, q, k, ef_search=ef)
                            times.append((time.perf_counter() - t) * 1000)
                            conn.rollback()
                            hits += len({cid for cid, _ in got} & gold)
                    q95 = statistics.quantiles(times, n=20)[18]
                    row = {"efSearch": max(ef, k), "k": k, "p50Ms": round(statistics.median(times), 2)}
                    row |= {"p95Ms": round(q95, 2), "recall": round(hits / (k * len(queries)), 3)}
                    rows.append(row)
                    print(
                        f"ef_search {row['efSearch']:4}  k {k:4}  p50 {row['p50Ms']:7.2f} ms  "
                        f"p95 {row['p95Ms']:7.2f} ms  recall@k {row['recall']:.3f}"
                    )
            report["knn"] = rows
            conn.close()
        finally:
            server.cleanup()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
