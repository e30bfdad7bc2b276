"""Ten years of memory, simulated: does the use-based lifecycle keep what is asked about while the index,
search time and packs shed what nobody uses? Before and after ``Memory.lifecycle("apply")``, and after every
archived file is revived.

The world (benchmarks/ten_year_world.py, seeded): ``--days`` (default 3,650) daily logs ending on a fixed
simulated today, MEMORY.md, notes, pinned logs; one-off chatter (several generators, LoCoMo turns when
../shared holds them) and 18 topics whose facts appear in some logs and keep being asked about (14 recurring
to today; 4 dormant: asked about for a while, then never again).

The usage stream: the workspace grows a week at a time (the week's files written, ``Memory.sync``), then the
week's questions go through ``Memory.pack`` (a recall), ``Memory.search`` or a search and ``Memory.get`` of the
top result, on a Memory whose ``clock`` is the simulated time: mdmem's own use tracking records them, at the
simulated time (query vectors memoised: the stream is not timed). Then ``Memory.lifecycle("apply")`` with the
default policy (daily logs 90 days old and unused for 60) moves files on disk.

Measured, each on a fresh Memory with use tracking off (measuring is not a use) over two question sets about
the same facts: ``held-out`` (wordings never asked in the stream) and ``asked`` (the stream's wording):

- R@5 and MRR (benchmarks/locomo.py's metric: gold = the fact's file and line; an archived file's lines count
  as the file's) by group: ``kept`` (facts of recurring topics in daily logs, notes, MEMORY.md, pinned logs)
  and ``dormant`` (facts of dormant topics in daily logs); after apply also with ``include_archive``;
- the index: chunks in the default search scope and in all (archived files stay indexed), the SQLite file's
  bytes (with its WAL), and the bytes and chunks of an index rebuilt from the in-scope files alone;
- search p50/p95 (ms, ``--rounds`` rounds of every question, query vectors memoised: the search, not the
  embedding);
- pack tokens (``--budget``, default 600): of the tokens of the packs' items, those from files holding no
  evidence for the question (``off-evidence``), from files the stream last used more than ``unusedDays`` before
  today or never (``cold``), and from files it never used (``never used``);
- revive: every archived file brought back (``--revive-each`` of them by ``lifecycle("revive", path)``, the
  rest by a read and the next apply: ``reviveOnUse``); every file's bytes and mtime against before apply, and
  every question's result list (paths, lines, scores) against before apply.

    python benchmarks/ten_year.py [--provider local|none] [--days 3650] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pack_latency import memoise_queries  # noqa: E402
from ten_year_measure import hashes, index_size, last_uses, measure  # noqa: E402
from ten_year_world import World, build, sim_time  # noqa: E402

from mdmem.memory import Memory  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MDMEMORY_TEST_SHARED") or REPO.parent / "shared")
DATA = SHARED / "bench" / "locomo" / "locomo-dev.json"
MODEL = SHARED / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
DAY = 86_400.0
UNUSED_DAYS = 60  # the default tier's unusedDays: "cold" below


def config(root: Path, name: str, workspace: Path, store: Path, args: argparse.Namespace, usage: bool) -> Path:
    ms: dict[str, Any] = {
        "provider": args.provider,
        "store": {"path": str(store)},
        "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
        "usage": {"enabled": usage},
    }
    if args.provider == "local":
        ms["local"] = {"modelPath": str(args.model), "threads": os.cpu_count() or 1}
    body = {"agents": {"defaults": {"workspace": str(workspace), "userTimezone": "UTC", "memorySearch": ms}}}
    path = root / f"{name}.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def run_stream(mem: Memory, world: World, workspace: Path, sim: list[float], sync_days: int) -> dict[str, Any]:
    """Grow the workspace ``sync_days`` at a time and ask that stretch's questions at their simulated times."""
    started, counts, syncs = time.perf_counter(), {"pack": 0, "search": 0, "get": 0}, 0
    spent = {"sync": 0.0, "uses": 0.0}
    events, n = world.events, 0
    day, year = world.first, world.first.year
    while day <= world.today:
        upto = min(day + timedelta(days=sync_days - 1), world.today)
        t0 = time.perf_counter()
        world.write(workspace, upto)
        sim[0] = sim_time(upto, 23.5)  # the files' mtimes are 20:00 of their day
        mem.sync()
        syncs += 1
        t1 = time.perf_counter()
        end = sim_time(upto, 24)
        while n < len(events) and events[n].at < end:
            e = events[n]
            sim[0] = e.at
            if e.kind == "pack":
                mem.pack(e.query, budget_tokens=600)
            else:
                results = mem.search(e.query, max_results=5)["results"]
                if e.kind == "get" and results:
                    mem.get(results[0]["path"])
            counts[e.kind] += 1
            n += 1
        spent["sync"] += t1 - t0
        spent["uses"] += time.perf_counter() - t1
        if upto.year != year or upto == world.today:
            print(f"  {upto}: {n} uses, sync {spent['sync']:.0f} s, uses {spent['uses']:.0f} s", flush=True)
            year = upto.year
        day = upto + timedelta(days=1)
    sim[0] = sim_time(world.today, 23.9)
    mem.usage(1)  # the last uses written
    return {
        "events": counts,
        "syncs": syncs,
        "seconds": round(time.perf_counter() - started, 1),
        "syncSeconds": round(spent["sync"], 1),
        "usesSeconds": round(spent["uses"], 1),
    }


def live_only_copy(root: Path, workspace: Path) -> Path:
    """A copy of the workspace without ``memory/archive/``: what an index of the default scope alone holds."""
    copy = root / "live-only"
    shutil.copytree(workspace, copy, ignore=lambda d, names: ["archive"] if Path(d) == workspace / "memory" else [])
    return copy


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    os.environ["MDMEMORY_HOME"] = str(root / "home")  # receipts and state inside the run's folder
    wall = time.perf_counter()
    world = build(args.seed, args.days, args.rate, args.oneoff_rate, args.data)
    workspace, store = root / "ws", root / "index.sqlite"
    sim = [sim_time(world.first, 0)]
    sets = {"held-out": world.held_out, "asked": world.asked}
    out: dict[str, Any] = {"days": args.days, "today": world.today.isoformat(), "provider": args.provider}
    with Memory.open(config_path=config(root, "stream", workspace, store, args, True), clock=lambda: sim[0]) as mem:
        memoise_queries(mem, world.stream_queries)
        out["stream"] = run_stream(mem, world, workspace, sim, args.sync_days)
        print("stream:", json.dumps(out["stream"]), flush=True)
        last, uses = last_uses(mem)
        now = sim[0]

        def cold(path: str) -> str:
            at = last.get(path)
            return "never" if at is None else "warm" if now - at < UNUSED_DAYS * DAY else "cold"

        before_files = hashes(workspace)
        phases: dict[str, Any] = {}

        def phase(name: str, ws: Path = workspace, index: Path = store, **kw: Any) -> dict[str, Any]:
            t0 = time.perf_counter()
            with Memory.open(config_path=config(root, "measure", ws, index, args, usage=False)) as m:
                synced = m.sync()["embedded"] if ws != workspace else None  # the live-only index is built here
                got = measure(m, sets, args, cold, **kw)
                got["index"] = index_size(m, index)
            if synced is not None:
                got["index"] |= {"embedded": synced, "buildAndMeasureSeconds": round(time.perf_counter() - t0, 1)}
            phases[name] = got
            print(name, json.dumps({k: v for k, v in got.items() if k not in ("results", "scores")}), flush=True)
            return got

        phase("before")
        plan = mem.lifecycle("plan")
        t0 = time.perf_counter()
        applied = mem.lifecycle("apply")
        out["apply"] = {
            "moved": len(applied["moved"]),
            "skipped": len(applied["skipped"]),
            "seconds": round(time.perf_counter() - t0, 2),
            "held": plan["counts"]["held"],
            "pinnedMoved": sum(m["path"] in world.pinned or m["path"] == "MEMORY.md" for m in applied["moved"]),
        }
        print("apply:", json.dumps(out["apply"]), flush=True)
        phase("after")
        phase("after+archive", include_archive=True, timed=False)
        if args.rebuild:
            phase("live-only", live_only_copy(root, workspace), root / "live-only.sqlite")
        archived = [m["to"] for m in applied["moved"]]
        t0 = time.perf_counter()
        for path in archived[args.revive_each :]:
            mem.get(path)  # a read: reviveOnUse brings it back at the next apply
        back = mem.lifecycle("apply")
        revived_by_use = sum(m["reason"] == "use" for m in back["moved"])
        for path in archived[: args.revive_each]:  # after that apply: a revive by hand counts no use, and
            mem.lifecycle("revive", path)  # an apply would archive the file again (it is still old and unused)
        after_files = hashes(workspace)
        leftover = sorted(p.relative_to(workspace).as_posix() for p in (workspace / "memory" / "archive").rglob("*.md"))
        out["revive"] = {
            "archived": len(archived),
            "byRevive": min(len(archived), args.revive_each),
            "byUse": revived_by_use,
            "stillArchived": len(leftover),
            "seconds": round(time.perf_counter() - t0, 1),
            "filesIdentical": after_files == before_files,
            "filesDiffering": sorted(p for p in before_files.keys() | after_files.keys()
                                     if before_files.get(p) != after_files.get(p))[:10],
        }  # fmt: skip
        phase("revived")
        same = [k for k, v in phases["before"]["results"].items() if phases["revived"]["results"].get(k) == v]
        out["revive"]["resultsIdentical"] = len(same) == len(phases["before"]["results"])
        out["revive"]["questionsSame"] = f"{len(same)}/{len(phases['before']['results'])}"
        ranked = [k for k, v in phases["before"]["results"].items()
                  if [r[:3] for r in v] == [r[:3] for r in phases["revived"]["results"].get(k, [])]]  # fmt: skip
        out["revive"]["rankingsSame"] = f"{len(ranked)}/{len(phases['before']['results'])}"
        out["revive"]["resultsDiffering"] = {
            k: {"before": v, "revived": phases["revived"]["results"].get(k)}
            for k, v in list(phases["before"]["results"].items())
            if k not in same
        }
        print("revive:", json.dumps({k: v for k, v in out["revive"].items() if k != "resultsDiffering"}), flush=True)
        out["usedFiles"] = sum(1 for p in uses if uses[p])
    out["lost"] = sorted(k for k, v in phases["before"]["scores"].items() if phases["after"]["scores"][k] < v)
    out["gained"] = sorted(k for k, v in phases["before"]["scores"].items() if phases["after"]["scores"][k] > v)
    out["phases"] = {k: {x: y for x, y in v.items() if x not in ("results", "scores")} for k, v in phases.items()}
    out["files"] = len(before_files)
    out["wallSeconds"] = round(time.perf_counter() - wall, 1)
    return out


def table(out: dict[str, Any]) -> str:
    ph = out["phases"]
    cols = [
        ("before", "before"),
        ("after", "after"),
        ("after+archive", "after, includeArchive"),
        ("live-only", "in-scope files only"),
        ("revived", "revived"),
    ]
    cols = [(k, t) for k, t in cols if k in ph]
    rows: list[tuple[str, list[str]]] = []
    for name in ("held-out", "asked"):
        for group in ("kept", "recurring", "notes", "pinned", "dormant"):
            cells = [ph[k]["recall"][name].get(group) for k, _ in cols]
            if any(cells):
                n = next(c["n"] for c in cells if c)
                rows.append((f"{name} {group} (n={n}) R@5 / MRR",
                             [f"{c['r@5']:.3f} / {c['mrr']:.3f}" if c else "" for c in cells]))  # fmt: skip
    rows.append(
        ("chunks in scope / all", [f"{ph[k]['index']['chunksInScope']} / {ph[k]['index']['chunks']}" for k, _ in cols])
    )
    rows.append(
        ("files in scope / all", [f"{ph[k]['index']['filesInScope']} / {ph[k]['index']['files']}" for k, _ in cols])
    )
    rows.append(("index file bytes", [f"{ph[k]['index']['bytes']:,}" for k, _ in cols]))
    rows.append(("  in use (not free pages)", [f"{ph[k]['index']['bytesInUse']:,}" for k, _ in cols]))
    rows.append(("search p50 / p95 ms", [f"{ph[k]['searchMs']['p50']} / {ph[k]['searchMs']['p95']}"
                                           if "searchMs" in ph[k] else "" for k, _ in cols]))  # fmt: skip
    for key, label in (
        ("total", "pack tokens"),
        ("offEvidence", "  from files without evidence"),
        ("cold", "  from cold files (unused 60 d)"),
        ("neverUsed", "  from never-used files"),
    ):
        rows.append((label, [_share(ph[k]["pack"], key) for k, _ in cols]))
    rows.append(
        ("pack: gold lines packed", [f"{ph[k]['pack']['goldInPack']}/{ph[k]['pack']['goldLines']}" for k, _ in cols])
    )
    width = max(len(r[0]) for r in rows)
    head = f"{'':{width}}  " + "  ".join(f"{t:>22}" for _, t in cols)
    return "\n".join([head] + [f"{label:{width}}  " + "  ".join(f"{c:>22}" for c in cells) for label, cells in rows])


def _share(pack: dict[str, int], key: str) -> str:
    return f"{pack[key]:,}" if key == "total" else f"{pack[key]:,} ({pack[key] / max(1, pack['total']):.0%})"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--provider", choices=["local", "none"], default="local")
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--data", type=Path, default=DATA, help="locomo-dev.json (some of the chatter; optional)")
    ap.add_argument("--days", type=int, default=3650, help="span; under ~100 days the default tier moves nothing")
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--rate", type=float, default=2.0, help="topic questions per simulated day (mean)")
    ap.add_argument("--oneoff-rate", type=float, default=0.3, help="one-off questions per simulated day (mean)")
    ap.add_argument("--sync-days", type=int, default=7, help="the workspace grows this many days per sync")
    ap.add_argument("--budget", type=int, default=600, help="pack budget of the measurement (tokens)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of every question per phase")
    ap.add_argument("--revive-each", type=int, default=25, help="archived files revived one by one (rest: by use)")
    ap.add_argument("--no-rebuild", dest="rebuild", action="store_false", help="skip the live-only index")
    ap.add_argument("--workdir", type=Path, help="keep the workspace and index here (default: a temp folder)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.days < 30:
        ap.error("--days: at least 30 (a policy of 90 days old needs some history)")
    if args.provider == "local" and not args.model.is_file():
        ap.error(f"--model {args.model} not found: pass --model FILE.gguf, or --provider none")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mdm-ten-year-") as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        if args.workdir and root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True, exist_ok=True)
        out = run(args, root)
    out["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, {cpu_name()}"
    out["date"] = date.today().isoformat()
    print()
    print(f"{out['files']} files over {out['days']} days to {out['today']}; provider {args.provider}; "
          f"{sum(out['stream']['events'].values())} uses in the stream; {out['date']}; {out['machine']}")  # fmt: skip
    print(table(out))
    print("apply:", json.dumps(out["apply"]))
    print("revive:", json.dumps({k: v for k, v in out["revive"].items() if k != "resultsDiffering"}))
    print("R@5 lost after apply:", out["lost"])
    print("R@5 gained after apply:", out["gained"])
    print(f"wall time {out['wallSeconds']} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
