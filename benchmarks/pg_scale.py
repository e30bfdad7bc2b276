"""Hybrid search at 100k and 1M vectors, SQLite and PostgreSQL side by side, and HNSW recall of the exact top-k.

The data is ``benchmarks/scale_data.py``'s: generated agent notes (about 50 tokens, one vector each, as a
64-token window of an index is) with real MiniLM vectors for the first 100,000 and, above, vectors derived
from them (see that module); everything is cached in ``--workdir``. Indexes are loaded straight into the
stores through their ``replace_file`` (50 chunks a file, text, keyword postings and vectors), one agent per
size (``scale100000``, ``scale1000000``) in one PostgreSQL 16 + pgvector (``pgserver``, data directory in the
work folder, kept between runs) and one SQLite file for 100k. Steps, each resumable and short:

    python benchmarks/pg_scale.py --workdir DIR load --size 100000 [--budget 840]   # both stores
    python benchmarks/pg_scale.py --workdir DIR load --size 1000000 --backend postgres
    python benchmarks/pg_scale.py --workdir DIR index --size 100000 --m 16 --ef-construction 64
    python benchmarks/pg_scale.py --workdir DIR recall --size 100000 [--ef 40 100 200]
    python benchmarks/pg_scale.py --workdir DIR search [--queries 200] [--json out.json]

``search`` runs ``Memory.search`` (the public path: generation check, identity, keyword and vector search,
fusion, snippets) on SQLite 100k, PostgreSQL 100k and PostgreSQL 1M, question by question in turn, with
the questions' real MiniLM vectors computed beforehand (the query embedding is timed apart). ``recall``
compares ``PgStore.knn`` with the exact top-k (numpy over all the agent's vectors) for k 10, 24 (a default
search's net: 6 results x 4) and 96 (a 1,000-token pack's: 24 candidates x 4), per ``efSearch``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.scale_data import DIMS, derived, derived_note, embed, note, provider, question, write_notes  # noqa: E402
from mdmem.providers.base import EmbeddingProvider  # noqa: E402

REAL = 100_000
SCHEMA = "scale"
MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
for _up in Path(__file__).resolve().parents:  # a work tree deeper than the project's clone beside shared/
    if (_up / "shared" / "models" / MODEL.name).exists():
        MODEL = _up / "shared" / "models" / MODEL.name
        break
SERVER_SETTINGS = {"shared_buffers": "4GB", "maintenance_work_mem": "4GB", "max_parallel_maintenance_workers": "1"}
KS = (10, 24, 96)


def server(workdir: Path) -> Any:
    """The work folder's PostgreSQL (created, tuned for a server with memory to spare, and started)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver's platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

        data = workdir / "pgdata"
        fresh = not data.exists()
        srv = pgserver.get_server(data, cleanup_mode="stop")
        if fresh:
            import psycopg

            with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
                for key, value in SERVER_SETTINGS.items():
                    conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
            srv.cleanup()
            srv = pgserver.get_server(data, cleanup_mode="stop")
    return srv


def dataset(workdir: Path, size: int, real_n: int = REAL) -> tuple[np.ndarray, Any]:
    """The ``size`` vectors (the first ``real_n`` real, the others derived) and chunk ``i``'s text."""
    real = embed(workdir, min(size, real_n), MODEL, budget=0.0)
    if real is None:
        raise SystemExit("the real embeddings are not all computed yet: run scale_data.embed first")
    if size <= real_n:
        return real[:size], note
    more, pairs = derived(real, size - real_n, workdir)

    def text(i: int) -> str:
        return note(i) if i < real_n else derived_note(int(pairs[i - real_n][0]), int(pairs[i - real_n][1]))

    return np.concatenate([real, more]), text


def agent_of(size: int) -> str:
    return f"scale{size}"


def open_store(workdir: Path, backend: str, size: int, url: str | None, **pg: Any) -> Any:
    if backend == "sqlite":
        from mdmem.store.index import Store

        return Store(workdir / f"{agent_of(size)}.sqlite")
    from mdmem.store.pg.store import PgStore

    assert url is not None
    return PgStore(url, agent_of(size), SCHEMA, **pg)


def load(args: argparse.Namespace) -> None:
    """Write the chunks (text, postings, vectors) file by file, resuming where a run stopped; then the
    identity a search checks, and on PostgreSQL the HNSW index (``settle``, as a sync ends)."""
    vecs, text = dataset(args.workdir, args.size, args.real)
    srv = server(args.workdir)
    url = srv.get_uri()
    started = time.monotonic()
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        store = open_store(args.workdir, backend, args.size, url)
        t0 = time.perf_counter()
        wrote, complete = write_notes(store, args.size, text, vecs, args.budget - (time.monotonic() - started))
        if not complete:
            print(f"{backend}: stopped after {args.budget:.0f} s; run again to go on", flush=True)
            return
        rate = wrote / max(time.perf_counter() - t0, 1e-9)
        print(f"{backend}: {args.size} chunks present ({wrote} written now, {rate:.0f}/s)", flush=True)
        store.set_meta("identity", identity(args.workdir, backend, url))
        if backend == "postgres":
            t0 = time.perf_counter()
            store.settle()
            store.analyze()
            print(f"postgres: HNSW index and statistics in {time.perf_counter() - t0:.1f} s", flush=True)
        store.close()


class Replay(EmbeddingProvider):
    """The local MiniLM provider's identity, answering queries with vectors it computed beforehand."""

    id = "local"
    enforces_deadline = True  # answers at once on the caller's thread

    def __init__(self, model: str, key_identity: dict[str, object], known: dict[str, np.ndarray]) -> None:
        self.model, self.dims, self._identity, self.known = model, DIMS, key_identity, known

    def identity(self) -> dict[str, object]:
        return self._identity

    def embed_batch(self, texts: Any) -> np.ndarray:
        return np.stack([self.known[t] for t in texts])


def queries(workdir: Path, n: int) -> tuple[list[str], np.ndarray, list[float], Any]:
    """Questions, their real MiniLM vectors (cached), the time each took to embed, and the provider."""
    path = workdir / f"questions-{n}.npz"
    texts = [question(i) for i in range(n)]
    real = provider(MODEL)
    if not path.exists():
        times, vecs = [], []
        for t in texts:
            t0 = time.perf_counter()
            vecs.append(real.embed_query(t))
            times.append((time.perf_counter() - t0) * 1000)
        np.savez(path, vectors=np.stack(vecs).astype(np.float32), times=np.array(times))
    got = np.load(path)
    return texts, got["vectors"], [float(x) for x in got["times"]], real


def memory(workdir: Path, backend: str, size: int, url: str | None, choice: Any) -> Any:
    from mdmem.config.load import load_config
    from mdmem.memory import Memory

    ws = workdir / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    store: dict[str, Any] = {"path": str(workdir / f"{agent_of(size)}.sqlite")}
    if backend == "postgres":
        store = {"backend": "postgres", "url": url, "schema": SCHEMA}
    ms = {
        "provider": "local",
        "local": {"modelPath": str(MODEL)},
        "store": store,
        "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
    }
    cfg_path = workdir / f"config-{backend}-{size}.json"
    cfg_path.write_text(
        json.dumps({"agents": {"list": [{"id": agent_of(size), "workspace": str(ws), "memorySearch": ms}]}})
    )
    cfg = load_config(cfg_path)
    return Memory(cfg.agent(agent_of(size)), cfg, choice=choice)


def replay_choice(workdir: Path, known: dict[str, np.ndarray], real: Any) -> Any:
    from mdmem.providers.factory import ProviderChoice

    return ProviderChoice(Replay(real.model, dict(real.identity()), known), "local")


def identity(workdir: Path, backend: str, url: str | None) -> dict[str, Any]:
    """What ``Memory`` with the local MiniLM expects in an index (else it searches by keywords only)."""
    real = provider(MODEL)
    mem = memory(workdir, backend, REAL, url, replay_choice(workdir, {}, real))
    return dict(mem.indexer.identity())


def search(args: argparse.Namespace) -> None:
    texts, qvecs, embed_ms, real = queries(args.workdir, args.queries + args.warm)
    choice = replay_choice(args.workdir, dict(zip(texts, qvecs, strict=True)), real)
    srv = server(args.workdir)
    url = srv.get_uri()
    setups = [(b, int(n)) for b, n in (s.split(":") for s in args.setups)]
    mems = {s: memory(args.workdir, s[0], s[1], url, choice) for s in setups}
    for text in texts[: args.warm]:  # page caches, prepared plans, the SQLite connection's caches
        for mem in mems.values():
            mem.search(text)
    times: dict[tuple[str, int], list[float]] = {s: [] for s in setups}
    modes: dict[tuple[str, int], set[str]] = {s: set() for s in setups}
    for text in texts[args.warm :]:
        for s, mem in mems.items():
            t0 = time.perf_counter()
            got = mem.search(text)
            times[s].append((time.perf_counter() - t0) * 1000)
            modes[s].add(got.get("mode", "?"))
            assert got["results"], (s, text)
    report: dict[str, Any] = {"queries": args.queries, "queryEmbeddingMs": _p(embed_ms), "search": {}}
    print(f"query embedding (MiniLM, not in the figures below): p50 {_p(embed_ms)['p50']} ms")
    for (backend, size), ms in times.items():
        report["search"][f"{backend}-{size}"] = {**_p(ms), "modes": sorted(modes[(backend, size)])}
        got = _p(ms)
        print(
            f"{backend:8s} {size:>8,} vectors: hybrid Memory.search p50 {got['p50']:6.1f} ms  p95 {got['p95']:6.1f} ms"
        )
    for mem in mems.values():
        mem.close()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def _p(ms: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(ms), 1), "p95": round(statistics.quantiles(ms, n=20)[18], 1)}


def rebuild_index(args: argparse.Namespace) -> None:
    """Drop the agent's HNSW index and build it again with ``--m`` / ``--ef-construction``."""
    from mdmem.config.store import HnswConfig
    from mdmem.store.pg import vectors

    srv = server(args.workdir)
    store = open_store(args.workdir, "postgres", args.size, srv.get_uri())
    params = HnswConfig(m=args.m, ef_construction=args.ef_construction)
    with store.session() as conn:
        with conn.transaction(), conn.cursor() as cur:
            vectors.drop_indexes(cur, SCHEMA, store.agent_id, store.gen, [DIMS])
        t0 = time.perf_counter()
        vectors.build_index(conn, SCHEMA, store.agent_id, store.gen, DIMS, params)
        conn.execute(f"ANALYZE {SCHEMA}.vectors")
        size = conn.execute(
            "SELECT pg_relation_size(%s::regclass)",
            (f"{SCHEMA}.{vectors.index_name(store.agent_id, store.gen, DIMS)}",),
        ).fetchone()[0]
    print(
        f"{args.size} vectors: HNSW m {args.m}, ef_construction {args.ef_construction} built in "
        f"{time.perf_counter() - t0:.0f} s ({size / 2**20:.0f} MiB)",
        flush=True,
    )


def recall(args: argparse.Namespace) -> None:
    from mdmem.config.store import HnswConfig

    vecs, _ = dataset(args.workdir, args.size)
    _, qvecs, _, _ = queries(args.workdir, args.queries + 20)
    qvecs = qvecs[20:]
    srv = server(args.workdir)
    url = srv.get_uri()
    base = open_store(args.workdir, "postgres", args.size, url)
    with base.session() as conn:
        rows = conn.execute(
            f"SELECT chunk_id, hash FROM {SCHEMA}.vectors WHERE agent_id = %s AND gen = %s", (base.agent_id, base.gen)
        ).fetchall()
    chunk_of = np.empty(len(vecs), dtype=np.int64)
    for cid, digest in rows:
        chunk_of[int(digest[1:])] = int(cid)
    truth = {k: [set(chunk_of[np.argpartition(-(vecs @ q), k)[:k]].tolist()) for q in qvecs] for k in KS}
    for ef in args.ef:
        store = open_store(args.workdir, "postgres", args.size, url, hnsw=HnswConfig(ef_search=ef))
        for k in KS:
            for q in qvecs[:10]:
                store.knn(q, k)
            times, hits = [], 0
            for q, gold in zip(qvecs, truth[k], strict=True):
                t0 = time.perf_counter()
                got = store.knn(q, k)
                times.append((time.perf_counter() - t0) * 1000)
                hits += len({cid for cid, _ in got} & gold)
            r, used, got_ms = hits / (k * len(qvecs)), min(max(ef, 2 * k), 1000), _p(times)
            print(
                f"{args.size:>8,} vectors  efSearch {ef:4d} (used {used:4d})  k {k:3d}: KNN p50 {got_ms['p50']:6.1f} "
                f"ms  p95 {got_ms['p95']:6.1f} ms  recall {r:.3f}",
                flush=True,
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--real", type=int, default=REAL, help="real MiniLM vectors (the rest are derived from them)")
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("load")
    p.add_argument("--size", type=int, default=REAL)
    p.add_argument("--backend", choices=("both", "sqlite", "postgres"), default="both")
    p.add_argument("--budget", type=float, default=840.0)
    p = sub.add_parser("index")
    p.add_argument("--size", type=int, default=REAL)
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=64)
    p = sub.add_parser("recall")
    p.add_argument("--size", type=int, default=REAL)
    p.add_argument("--ef", type=int, nargs="+", default=[40, 100, 200])
    p.add_argument("--queries", type=int, default=200)
    p = sub.add_parser("search")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warm", type=int, default=100)
    p.add_argument("--setups", nargs="+", default=["sqlite:100000", "postgres:100000", "postgres:1000000"])
    p.add_argument("--json", type=Path)
    args = ap.parse_args()
    {"load": load, "index": rebuild_index, "recall": recall, "search": search}[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
