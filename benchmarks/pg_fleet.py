"""Many writers and many readers at once, SQLite and PostgreSQL side by side: 8 agents, one writer process
each, and 16 reader processes, for 60 s per store.

Each agent's workspace starts with ``--notes`` generated notes (``scale_data.note``, 25 a daily file),
indexed before the clock starts. Then, at once:

- each writer appends a new note to its agent's file of the day and syncs (``Memory.sync``: chunking,
  keyword index, embedding, vectors), again and again;
- each reader asks ``Memory.search`` (hybrid; no syncing of its own) a question about a random agent.

The provider is the deterministic ``hash`` one (384 dimensions) on both sides, so the figures measure the
stores, not the model: with MiniLM the 2 cores would spend the minute embedding. Reported: searches per
second, their p50 / p95, writes (syncs that indexed a change) done, errors, and searches without an
answer. PostgreSQL runs in a server started for the run (``pgserver``), one pool per process.

    python benchmarks/pg_fleet.py [--seconds 60] [--agents 8] [--readers 16] [--notes 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.scale_data import note, question  # noqa: E402

PER_FILE = 25


def config(root: Path, backend: str, agents: int, url: str | None) -> Path:
    store: dict[str, Any] = {"path": str(root / "state" / "{agentId}.sqlite")}
    if backend == "postgres":
        store = {"backend": "postgres", "url": url, "schema": "fleet"}
    ms = {
        "provider": "hash",
        "store": store,
        "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
    }
    listed = [{"id": f"agent{a}", "workspace": str(root / f"ws{a}")} for a in range(agents)]
    path = root / f"config-{backend}.json"
    path.write_text(json.dumps({"agents": {"defaults": {"memorySearch": ms}, "list": listed}}))
    return path


def seed(root: Path, agents: int, notes: int) -> None:
    for a in range(agents):
        folder = root / f"ws{a}" / "memory"
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(0, notes, PER_FILE):
            body = "\n\n".join(f"## {i}\n\n{note(a * 1_000_000 + i)}" for i in range(f, min(f + PER_FILE, notes)))
            (folder / f"2026-{1 + f // PER_FILE // 28 % 12:02d}-{1 + f // PER_FILE % 28:02d}.md").write_text(
                f"# Notes {f}\n\n{body}\n"
            )


def _open(cfg_path: str, agent: str) -> Any:
    from mdmem.config.load import load_config
    from mdmem.memory import Memory

    cfg = load_config(cfg_path)
    return Memory(cfg.agent(agent), cfg)


def writer(cfg_path: str, root: str, a: int, start: Any, seconds: float, out: Any) -> None:
    try:
        mem = _open(cfg_path, f"agent{a}")
        today = Path(root) / f"ws{a}" / "memory" / "2026-12-31.md"
        today.write_text("# Today\n")
        mem.sync()
        start.wait()
        done = errors = 0
        n = 0
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            n += 1
            with today.open("a", encoding="utf-8") as f:
                f.write(f"\n## Entry {n}\n\n{note(a * 1_000_000 + 500_000 + n)}\n")
            try:
                report = mem.sync()
                done += 1 if report.get("indexed") else 0
            except Exception:
                errors += 1
                traceback.print_exc()
        mem.close()
        out.put({"role": "writer", "writes": done, "errors": errors})
    except Exception:
        traceback.print_exc()
        out.put({"role": "writer", "writes": 0, "errors": 1})


def reader(cfg_path: str, agents: int, r: int, start: Any, seconds: float, out: Any) -> None:
    times: list[float] = []
    errors = unanswered = 0
    try:
        mems = [_open(cfg_path, f"agent{a}") for a in range(agents)]
        for m in mems:
            m.search("warm up")
        rng = random.Random(r)
        start.wait()
        until = time.monotonic() + seconds
        i = 0
        while time.monotonic() < until:
            i += 1
            mem = mems[rng.randrange(agents)]
            t0 = time.perf_counter()
            try:
                got = mem.search(question(r * 100_000 + i))
                times.append((time.perf_counter() - t0) * 1000)
                unanswered += 0 if got["results"] else 1
                if not got["results"] and os.environ.get("FLEET_DEBUG"):
                    print("UNANSWERED", got, file=sys.stderr)
            except Exception:
                errors += 1
                traceback.print_exc()
        for m in mems:
            m.close()
    except Exception:
        traceback.print_exc()
        errors += 1
    out.put({"role": "reader", "times": times, "errors": errors, "unanswered": unanswered})


def run(backend: str, root: Path, args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    cfg = config(root, backend, args.agents, url)
    t0 = time.perf_counter()
    for a in range(args.agents):  # the starting index, before the clock
        mem = _open(str(cfg), f"agent{a}")
        mem.sync()
        mem.close()
    print(
        f"{backend}: {args.agents} agents x {args.notes} notes indexed in {time.perf_counter() - t0:.0f} s", flush=True
    )
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=writer, args=(str(cfg), str(root), a, start, args.seconds, out)) for a in range(args.agents)
    ]
    procs += [
        ctx.Process(target=reader, args=(str(cfg), args.agents, r, start, args.seconds, out))
        for r in range(args.readers)
    ]
    for p in procs:
        p.start()
    time.sleep(args.settle)  # every process imported, opened its stores and warmed up
    start.set()
    results = [out.get(timeout=args.seconds + 600) for _ in procs]
    for p in procs:
        p.join(60)
    times = [t for r in results if r["role"] == "reader" for t in r["times"]]
    summary = {
        "searches": len(times),
        "searchesPerSecond": round(len(times) / args.seconds, 1),
        "p50Ms": round(statistics.median(times), 1) if times else None,
        "p95Ms": round(statistics.quantiles(times, n=20)[18], 1) if len(times) > 1 else None,
        "writes": sum(r.get("writes", 0) for r in results),
        "errors": sum(r["errors"] for r in results),
        "unanswered": sum(r.get("unanswered", 0) for r in results),
    }
    print(
        f"{backend:8s} {summary['searchesPerSecond']:7.1f} searches/s  p50 {summary['p50Ms']} ms  p95 "
        f"{summary['p95Ms']} ms  writes {summary['writes']}  errors {summary['errors']}  "
        f"unanswered {summary['unanswered']}",
        flush=True,
    )
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--settle", type=float, default=20.0, help="seconds for the processes to start")
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver's platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

    report: dict[str, Any] = {"agents": args.agents, "readers": args.readers, "seconds": args.seconds}
    with tempfile.TemporaryDirectory(prefix="pg-fleet-") as tmp:
        base = Path(tmp)
        os.environ["MDMEMORY_HOME"] = str(base / "home")
        server = pgserver.get_server(base / "pgdata", cleanup_mode="delete") if "postgres" in args.backends else None
        try:
            for backend in args.backends:
                root = base / backend
                seed(root, args.agents, args.notes)
                report[backend] = run(backend, root, args, server.get_uri() if server else None)
        finally:
            if server is not None:
                server.cleanup()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
