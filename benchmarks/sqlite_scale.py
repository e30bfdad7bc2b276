"""Hybrid search on one agent's SQLite index at up to 1M vectors: the inverted file (``store.ivf``) against the
exact top-k, and ``Memory.search`` with each half timed apart.

The data is ``benchmarks/scale_data.py``'s, as in ``pg_scale.py``: generated notes with real MiniLM vectors
for the first ``--real`` (100,000 by default; fewer when the shared folder holds fewer) and derived vectors
above. The index is ``sqlite-<size>.sqlite`` in ``--workdir``, loaded through ``Store.replace_file`` (50
chunks a file), then settled as a sync ends (which builds the lists). Steps, each resumable:

    python benchmarks/sqlite_scale.py --workdir DIR load --size 1000000 [--real 100000] [--budget 3000]
    python benchmarks/sqlite_scale.py --workdir DIR recall --size 1000000 [--probes 16 32 48 64]
    python benchmarks/sqlite_scale.py --workdir DIR keywords --size 1000000
    python benchmarks/sqlite_scale.py --workdir DIR search --size 1000000 [--probes 48] [--json out.json]

``recall`` compares ``Store.knn`` (a warm store: lists in memory) with the exact top-k (numpy over every
vector) for k 10, 24 (a default search's net: 6 results x 4) and 96 (a 1,000-token pack's), per ``probes``,
and the same for the path used without lists (the 1-bit codes of ``chunks_vec_bits``, rescored).
``keywords`` compares the keyword plan of large indexes (most terms first) with FTS5's exact ranking. ``search``
reports the open, the first KNN, the load of the lists, ``Memory.search`` p50/p95 (hybrid), the keyword-only
search and the KNN alone, and the process's resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pg_scale import KS, MODEL, Replay, _p, dataset  # noqa: E402
from benchmarks.scale_data import provider, question, write_notes  # noqa: E402


def index_path(workdir: Path, size: int, real_n: int) -> Path:
    return workdir / f"sqlite-{size}-real{real_n}.sqlite"


def load(args: argparse.Namespace) -> None:
    from mdmem.store.index import Store

    vecs, text = dataset(args.workdir, args.size, args.real)
    store = Store(index_path(args.workdir, args.size, args.real))
    started = time.monotonic()
    wrote, complete = write_notes(store, args.size, text, vecs, args.budget)
    if not complete:
        print(f"stopped after {args.budget:.0f} s ({wrote} chunks written); run again to go on", flush=True)
        return
    rate = wrote / max(time.monotonic() - started, 1e-9)
    print(f"{args.size} chunks present ({wrote} written now, {rate:.0f}/s)", flush=True)
    store.set_meta("identity", identity(args.workdir, args.size, args.real))
    t0 = time.perf_counter()
    store.settle()
    print(f"settle (lists built): {time.perf_counter() - t0:.1f} s: {store.get_meta('vector_lists')}", flush=True)
    store.close()


def queries(workdir: Path, n: int) -> tuple[list[str], np.ndarray]:
    """Questions and their real MiniLM vectors (``pg_scale``'s cache file when it holds enough)."""
    for path in sorted(workdir.glob("questions-*.npz"), key=lambda p: int(p.stem.split("-")[1])):
        if int(path.stem.split("-")[1]) >= n:
            return [question(i) for i in range(n)], np.load(path)["vectors"][:n]
    real = provider(MODEL)
    vecs = np.stack([real.embed_query(question(i)) for i in range(n)]).astype(np.float32)
    np.savez(workdir / f"questions-{n}.npz", vectors=vecs, times=np.zeros(n))
    return [question(i) for i in range(n)], vecs


def memory(workdir: Path, size: int, real_n: int, choice: Any, probes: int) -> Any:
    from mdmem.config.load import load_config
    from mdmem.memory import Memory

    ws = workdir / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    ms = {
        "provider": "local",
        "local": {"modelPath": str(MODEL)},
        "store": {"path": str(index_path(workdir, size, real_n)), "ivf": {"probes": probes}},
        "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
    }
    cfg_path = workdir / f"config-sqlite-{size}.json"
    cfg_path.write_text(json.dumps({"agents": {"list": [{"id": "scale", "workspace": str(ws), "memorySearch": ms}]}}))
    cfg = load_config(cfg_path)
    return Memory(cfg.agent("scale"), cfg, choice=choice)


def choice_of(known: dict[str, np.ndarray]) -> Any:
    from mdmem.providers.factory import ProviderChoice

    real = provider(MODEL)
    return ProviderChoice(Replay(real.model, dict(real.identity()), known), "local")


def identity(workdir: Path, size: int, real_n: int) -> dict[str, Any]:
    mem = memory(workdir, size, real_n, choice_of({}), 48)
    got = dict(mem.indexer.identity())
    mem.close()
    return got


def recall(args: argparse.Namespace) -> None:
    from mdmem.config.store import IvfConfig
    from mdmem.store.index import Store

    vecs, _ = dataset(args.workdir, args.size, args.real)
    _, qvecs = queries(args.workdir, args.queries + 20)
    qvecs = qvecs[20:]
    path = index_path(args.workdir, args.size, args.real)
    with Store(path) as s:
        chunk_of = np.empty(len(vecs), dtype=np.int64)
        for cid, digest in s.conn.execute("SELECT id, hash FROM chunks"):
            chunk_of[int(digest[1:])] = int(cid)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    sims = np.concatenate([qvecs @ unit[s : s + 100_000].T for s in range(0, len(unit), 100_000)], axis=1)
    truth = {k: [set(chunk_of[np.argpartition(-row, k)[:k]].tolist()) for row in sims] for k in KS}
    del sims
    setups: list[tuple[str, IvfConfig]] = [(f"lists, probes {p}", IvfConfig(probes=p)) for p in args.probes]
    if args.bits:
        setups.append(("no lists (1-bit codes, rescored)", IvfConfig(exact_below=10**9)))
    for name, conf in setups:
        store = Store(path, ivf=conf)
        t0 = time.perf_counter()
        store.knn(qvecs[0], 10)
        first = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        store.knn(qvecs[0], 10)
        second = (time.perf_counter() - t0) * 1000
        print(f"{name}: first KNN {first:.0f} ms, second (loads the lists) {second:.0f} ms", flush=True)
        for k in KS:
            times, hits = [], 0
            for q, gold in zip(qvecs, truth[k], strict=True):
                t0 = time.perf_counter()
                got = store.knn(q, k)
                times.append((time.perf_counter() - t0) * 1000)
                hits += len({cid for cid, _ in got} & gold)
            got_ms = _p(times)
            print(
                f"  {args.size:>8,} vectors  k {k:3d}: KNN p50 {got_ms['p50']:6.1f} ms  p95 {got_ms['p95']:6.1f} ms  "
                f"recall {hits / (k * len(qvecs)):.3f}",
                flush=True,
            )
        store.close()


def keywords(args: argparse.Namespace) -> None:
    """The keyword plan of a large index (most terms first) against FTS5's exact ranking, on the terms a
    search keeps, for k 24 (a default search's net)."""
    from mdmem.search.hybrid import _prune_common
    from mdmem.search.query import keyword_query, query_terms
    from mdmem.store import fts
    from mdmem.store.index import Store

    store = Store(index_path(args.workdir, args.size, args.real))
    k, hits, total, fast, slow, used = 24, 0, 0, [], [], 0
    for i in range(20, 20 + args.queries):
        text = question(i)
        terms = [t for t in _prune_common(store, keyword_query(text, query_terms(text))) if t]
        t0 = time.perf_counter()
        got = store.keyword_matches(terms, k)
        fast.append((time.perf_counter() - t0) * 1000)
        used += store.keyword_search.most_terms_first(terms, k) is not None
        saved, fts.MOST_TERMS_MIN_CHUNKS = fts.MOST_TERMS_MIN_CHUNKS, 10**12
        t0 = time.perf_counter()
        exact = store.keyword_matches(terms, k)
        slow.append((time.perf_counter() - t0) * 1000)
        fts.MOST_TERMS_MIN_CHUNKS = saved
        hits += len({r for r, _, _ in got} & {r for r, _, _ in exact})
        total += len(exact)
    print(
        f"{args.size:,} chunks, k {k}: most-terms plan used for {used}/{args.queries} questions; recall of the "
        f"exact top k {hits / max(total, 1):.3f}; p50 {_p(fast)['p50']} ms (p95 {_p(fast)['p95']}) against "
        f"{_p(slow)['p50']} ms (p95 {_p(slow)['p95']}) exact",
        flush=True,
    )


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def search(args: argparse.Namespace) -> None:
    from mdmem.search import hybrid

    texts, qvecs = queries(args.workdir, args.queries + args.warm)
    known = dict(zip(texts, qvecs, strict=True))
    report: dict[str, Any] = {"size": args.size, "real": args.real, "probes": args.probes, "rssBeforeMiB": rss_mib()}
    t0 = time.perf_counter()
    mem = memory(args.workdir, args.size, args.real, choice_of(known), args.probes)
    store = mem.store
    report["openMs"] = round((time.perf_counter() - t0) * 1000, 1)
    for i, step in enumerate(("firstSearchMs", "secondSearchMs")):  # the second loads the lists
        t0 = time.perf_counter()
        mem.search(texts[i])
        report[step] = round((time.perf_counter() - t0) * 1000, 1)
    for text in texts[2 : args.warm]:
        mem.search(text)
    full, words, near, modes = [], [], [], set()
    cfg = mem.settings.query
    for text in texts[args.warm :]:
        t0 = time.perf_counter()
        got = mem.search(text)
        full.append((time.perf_counter() - t0) * 1000)
        modes.add(got.get("mode", "?"))
        t0 = time.perf_counter()
        hybrid.search(
            store,
            text,
            query_vector=None,
            max_results=cfg.max_results,
            min_score=cfg.min_score,
            hybrid=cfg.hybrid,
            keyword_score=cfg.keyword_score,
        )
        words.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        store.knn(known[text], cfg.max_results * cfg.hybrid.candidate_multiplier)
        near.append((time.perf_counter() - t0) * 1000)
    report.update(
        {"search": {**_p(full), "modes": sorted(modes)}, "keywordOnly": _p(words), "knn": _p(near), "rssMiB": rss_mib()}
    )
    scan = store.vectors.scan
    report["listsHeld"] = scan.live_count if scan is not None else 0
    print(json.dumps(report, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    mem.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--real", type=int, default=100_000, help="real MiniLM vectors (the rest are derived)")
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("load")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--budget", type=float, default=3000.0)
    p = sub.add_parser("recall")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--probes", type=int, nargs="+", default=[16, 32, 48, 64])
    p.add_argument("--bits", action="store_true", help="also the path without lists")
    p.add_argument("--queries", type=int, default=200)
    p = sub.add_parser("keywords")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200)
    p = sub.add_parser("search")
    p.add_argument("--size", type=int, default=1_000_000)
    p.add_argument("--probes", type=int, default=48)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--warm", type=int, default=50)
    p.add_argument("--json", type=Path)
    args = ap.parse_args()
    {"load": load, "recall": recall, "keywords": keywords, "search": search}[args.step](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
