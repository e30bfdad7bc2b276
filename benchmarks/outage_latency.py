"""Search latency during an embeddings outage: p50/p95/max of ``Memory.search`` per fault.

A real OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py) serves a workspace of a few hundred
notes, indexed while it is healthy; then it hangs, trickles one byte a second (after the headers, or from
the status line on), answers 500, or sends a 256 MiB body, and N searches run through ``Memory.search``.
Each fault runs twice: with the breaker off (``breaker.failures`` 1000, so every search waits for the query
embedding until the budget ends: this measures the bound itself) and with the default breaker (two failed
searches open it; the rest skip the embedding at once). Target: p95 <= budget + 50 ms.

    python benchmarks/outage_latency.py [--searches 20] [--notes 300] [--budget-ms 2000] [--json out.json]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.memory import Memory  # noqa: E402
from tests.fake_openai import FakeOpenAIServer, Fault  # noqa: E402

FAULTS = {
    "hang": Fault.hang(),
    "trickle": Fault.trickle(1.0),
    "trickle-headers": Fault.trickle(1.0, headers=True),
    "http-500": Fault.server_error(),
    "huge-body": Fault.huge(256 * 1024 * 1024, declared=False),
}
WORDS = "heron river backup server Alice project budget garden coffee release flight dinner".split()


def workspace(root: Path, notes: int) -> Path:
    ws = root / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nA grey heron fishes by the river every morning.\n")
    for i in range(notes):
        day = f"2025-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}" + (f"-{i // 336}" if i >= 336 else "")
        lines = [
            f"- {WORDS[(i + k) % len(WORDS)]} note {i}.{k}: met about the {WORDS[(i * k) % len(WORDS)]}"
            for k in range(6)
        ]
        (ws / "memory" / f"{day}.md").write_text(f"# {day}\n\n" + "\n".join(lines) + "\n")
    return ws


def open_memory(root: Path, ws: Path, server: FakeOpenAIServer, name: str, budget_ms: int, failures: int) -> Memory:
    memory_search = {
        "provider": "openai",
        "remote": {"baseUrl": server.url, "apiKey": "sk-bench", "dimensions": 64},
        "store": {"path": str(root / f"{name}.sqlite")},
        "chunking": {"windowTokens": 0},
        "query": {"embedTimeoutMs": budget_ms},
        "breaker": {"failures": failures},
        "sync": {"watch": False},
    }
    path = root / f"{name}.json5"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": memory_search}}}))
    return Memory.open(config_path=path)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(root: Path, ws: Path, server: FakeOpenAIServer, fault: str, breaker: bool, args: argparse.Namespace) -> dict:
    name = f"{fault}-{'breaker' if breaker else 'nobreaker'}"
    with open_memory(root, ws, server, name, args.budget_ms, 2 if breaker else 1000) as mem:
        server.outage(None)
        mem.sync()
        assert mem.search("heron river")["mode"] == "hybrid", "the healthy server must answer"
        server.outage(FAULTS[fault])
        times, modes, hits, warnings = [], set(), 0, set()
        for i in range(args.searches):
            started = time.perf_counter()
            response = mem.search(f"{WORDS[i % len(WORDS)]} river")
            times.append(time.perf_counter() - started)
            modes.add(response["mode"])
            hits += bool(response["results"])
            warnings.update(w.split(":")[0] for w in response.get("warnings", []))
        server.outage(None)
        return {
            "fault": fault,
            "breaker": breaker,
            "searches": len(times),
            "p50_ms": 1000 * statistics.median(times),
            "p95_ms": 1000 * percentile(times, 0.95),
            "max_ms": 1000 * max(times),
            "modes": sorted(modes),
            "with_results": hits,
            "breaker_state": mem.status()["breaker"]["state"],
            "warnings": sorted(warnings),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--searches", type=int, default=20)
    parser.add_argument("--notes", type=int, default=300)
    parser.add_argument("--budget-ms", type=int, default=2000, help="query.embedTimeoutMs")
    parser.add_argument("--faults", nargs="*", default=list(FAULTS), choices=list(FAULTS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(dims=64) as server:
        root = Path(tmp)
        ws = workspace(root, args.notes)
        for fault in args.faults:
            for breaker in (False, True):
                rows.append(run(root, ws, server, fault, breaker, args))
                row = rows[-1]
                print(
                    f"{fault:16} breaker {'on ' if breaker else 'off'}  p50 {row['p50_ms']:7.1f} ms  "
                    f"p95 {row['p95_ms']:7.1f} ms  max {row['max_ms']:7.1f} ms  mode {'/'.join(row['modes'])}  "
                    f"with results {row['with_results']}/{row['searches']}  breaker {row['breaker_state']}",
                    flush=True,
                )
    budget = args.budget_ms
    worst = max(r["p95_ms"] for r in rows)
    verdict = "met" if worst <= budget + 50 else "MISSED"
    print(f"budget {budget} ms; worst p95 {worst:.1f} ms; target p95 <= {budget + 50} ms: {verdict}")
    if args.json:
        result = {"budget_ms": budget, "notes": args.notes, "python": platform.python_version(), "rows": rows}
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
