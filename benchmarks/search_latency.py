"""Search latency at 10k and 100k chunks: p50/p95 for vector-only, keyword-only and hybrid search.

Builds real mdmem indexes (SQLite + FTS5 + sqlite-vec) of synthetic chunks: Zipf-distributed English
words mixed with names, dates and a little CJK, ~400 tokens each, with random 384-dim unit vectors. The
query embedding is excluded: queries come with precomputed vectors. Prints a table and, with --json, a
JSON report.

    python benchmarks/search_latency.py [--sizes 10000 100000] [--queries 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.config.load import HybridConfig  # noqa: E402
from mdmem.search.hybrid import search  # noqa: E402
from mdmem.store import ChunkRow, FileRow, Store  # noqa: E402

DIMS = 384
CHUNKS_PER_FILE = 50
STOP = (
    "the of and to a in is it you that he was for on are with as i his they be at one have this from or had by "
    "but some what there we can out other were all your when up use word how said an each she which do their "
    "time if will way about many then them would write like so these her long make thing see him two has look "
    "more day could go come did my sound no most number who over know water than call first people may down"
).split()
TOPICS = (
    "meeting project decision backup server deploy database index search memory note todo review budget travel "
    "flight hotel dinner birthday doctor vet garden tomato basil coffee editor release bug fix test benchmark "
    "latency recall vector keyword chunk embedding model provider config watcher sync daemon agent session "
    "context compaction flush prompt token summary weekly plan goal habit book film music guitar run swim hike"
).split()
NAMES = "Dana Mika Pixel Atlas Vault Kyoto Lisbon Porto Oslo Berlin Alice Bob Carol Dave Erin Frank".split()
CJK = ["寿司", "拉面", "京都", "会议", "项目", "备份", "旅行", "生日"]
SYLLABLES = "ka ri mo te na lu pe so vi da ren tal mor ish ent ver lan cor pri gal".split()


def vocabulary(rng: np.random.Generator, size: int = 20_000) -> list[str]:
    """Stop words first, then topic words, then pseudo-words: a Zipf law over ~20k distinct words."""
    pseudo: dict[str, None] = {}
    while len(pseudo) < size:
        pseudo.setdefault("".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5)))), None)
    return STOP + TOPICS + [w for w in pseudo if w not in STOP and w not in TOPICS]


def make_text(rng: np.random.Generator, words: list[str], probs: np.ndarray) -> str:
    picked = [words[i] for i in rng.choice(len(words), size=300, p=probs)]
    for _ in range(4):
        picked.insert(int(rng.integers(len(picked))), str(rng.choice(NAMES)))
    picked.insert(int(rng.integers(len(picked))), f"2026-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}")
    if rng.random() < 0.2:
        picked.insert(int(rng.integers(len(picked))), str(rng.choice(CJK)))
    lines = [" ".join(picked[i : i + 15]) for i in range(0, len(picked), 15)]
    return "\n".join(f"- {line}" for line in lines)


def zipf(n: int) -> np.ndarray:
    ranks = np.arange(1, n + 1, dtype=np.float64)
    weights = 1 / ranks**1.05
    return weights / weights.sum()


def build(path: Path, n: int, seed: int = 7, per_chunk: int = 1) -> float:
    rng = np.random.default_rng(seed)
    words = vocabulary(np.random.default_rng(1))
    probs = zipf(len(words))
    started = time.perf_counter()
    with Store(path) as store:
        for f in range(0, n, CHUNKS_PER_FILE):
            count = min(CHUNKS_PER_FILE, n - f)
            rel = f"memory/2026/{f // CHUNKS_PER_FILE:05d}.md"
            rows = [
                ChunkRow(
                    rel,
                    "memory",
                    i * 20 + 1,
                    i * 20 + 20,
                    f"h{f + i}",
                    f"e{f + i}",
                    "Notes",
                    make_text(rng, words, probs),
                )
                for i in range(count)
            ]
            vecs = rng.normal(size=(count * per_chunk, DIMS)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            grouped = [
                ([f"v{f + i}.{w}" for w in range(per_chunk)], vecs[i * per_chunk : (i + 1) * per_chunk])
                for i in range(count)
            ]
            store.replace_file(FileRow(rel, "memory", f"hash{f}", 0.0, 0), rows, grouped)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - started


def measure(path: Path, queries: int, seed: int = 11) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    words = vocabulary(np.random.default_rng(1))
    content = words[len(STOP) : len(STOP) + 3000]
    # agent-style questions: stop words around two or three content words and sometimes a name
    texts = [
        f"what did {rng.choice(NAMES)} say about the {' '.join(rng.choice(content, size=int(rng.integers(2, 4))))}"
        for _ in range(queries)
    ]
    vecs = rng.normal(size=(queries, DIMS)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    hybrid = HybridConfig()
    modes = {
        "vector": dict(hybrid=HybridConfig(enabled=False), use_vec=True),
        "keyword": dict(hybrid=hybrid, use_vec=False),
        "hybrid": dict(hybrid=hybrid, use_vec=True),
    }
    out: dict[str, dict[str, float]] = {}
    with Store(path) as store:
        for name, opts in modes.items():
            for warm in range(5):
                search(
                    store,
                    texts[warm],
                    query_vector=vecs[warm] if opts["use_vec"] else None,
                    max_results=6,
                    min_score=0.0,
                    hybrid=opts["hybrid"],
                )
            times = []
            for q, v in zip(texts, vecs, strict=True):
                t0 = time.perf_counter()
                search(
                    store,
                    q,
                    query_vector=v if opts["use_vec"] else None,
                    max_results=6,
                    min_score=0.0,
                    hybrid=opts["hybrid"],
                )
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            out[name] = {
                "p50_ms": round(statistics.median(times), 2),
                "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--vectors-per-chunk", type=int, default=1, help="e.g. 5: the chunk plus 4 windows")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    report = {
        "vectors_per_chunk": args.vectors_per_chunk,
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "results": {},
    }
    print(f"{'chunks':>8} {'build s':>8} {'mode':>8} {'p50 ms':>8} {'p95 ms':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            db = Path(tmp) / f"bench-{n}.sqlite"
            seconds = build(db, n, per_chunk=args.vectors_per_chunk)
            figures = measure(db, args.queries)
            report["results"][str(n)] = {"build_seconds": round(seconds, 1), **figures}
            for mode, f in figures.items():
                print(f"{n:>8} {seconds:>8.1f} {mode:>8} {f['p50_ms']:>8.2f} {f['p95_ms']:>8.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
