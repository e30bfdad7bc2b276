"""Wall time of whole ``mdmemory`` commands, as a runtime that shells out per tool call pays it.

Copies ``workspace-template/`` to a temporary workspace, indexes it once, then runs each command as a new
process (``python -m mdmemory ...`` with the project's interpreter) ``--runs`` times and prints p50 / p95 in
milliseconds. "warm" runs back to back; "cold" drops the page cache before each run (needs root: writes
``/proc/sys/vm/drop_caches``; skipped with a note otherwise). Keyword-only (``provider: "none"``) unless
``--model`` names a GGUF, which adds ``search`` with the local model (query embedding included).
Targets (issue 14): keyword-only ``search`` p50 <= 150 ms, ``get`` p50 <= 100 ms.

    python benchmarks/cli_latency.py [--runs 20] [--cold-runs 5] [--model PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DROP_CACHES = Path("/proc/sys/vm/drop_caches")

COMMANDS: dict[str, list[str]] = {
    "search (keyword)": ["search", "backup schedule", "--json"],
    "get": ["get", "MEMORY.md", "--json"],
    "status": ["status", "--json"],
    "context": ["context", "--json"],
    "remember": ["remember", "benchmark note", "--json"],
    "flush check": ["flush", "check", "bench", "--total-tokens", "1000", "--context-window", "200000", "--json"],
    "pack (keyword)": ["pack", "backup schedule", "--json"],
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def can_drop_caches() -> bool:
    return os.geteuid() == 0 and os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n")


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:])} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return took


def measure(argv: list[str], env: dict[str, str], runs: int, cold: bool) -> dict[str, float]:
    times = []
    for _ in range(runs):
        if cold:
            drop_caches()
        times.append(timed(argv, env))
    return {"p50": round(statistics.median(times), 1), "p95": round(percentile(times, 0.95), 1), "runs": runs}


def write_config(tmp: Path, model: Path | None) -> Path:
    memory_search: dict[str, object] = {"store": {"path": str(tmp / "index" / "{agentId}.sqlite")}}
    if model is None:
        memory_search["provider"] = "none"
    else:
        memory_search.update(provider="local", fallback="none", local={"modelPath": str(model)})
    config = {"agents": {"defaults": {"workspace": str(tmp / "ws"), "memorySearch": memory_search}}}
    path = tmp / "config.json"
    path.write_text(json.dumps(config))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--model", type=Path, help="a GGUF embedding model: also time search with it")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        shutil.copytree(ROOT / "workspace-template", tmp / "ws")
        env = {**os.environ, "MDMEMORY_CONFIG": str(write_config(tmp, None)), "PYTHONPATH": str(ROOT)}
        env.pop("OPENAI_API_KEY", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure as installed: bytecode cached after the first run
        base = [sys.executable, "-m", "mdmemory"]
        subprocess.run([*base, "index", "--json"], env=env, check=True, stdout=subprocess.DEVNULL)
        commands = {name: [*base, *argv] for name, argv in COMMANDS.items()}
        runs: list[tuple[str, list[str], dict[str, str]]] = [(n, a, env) for n, a in commands.items()]
        if args.model is not None:
            shutil.copytree(ROOT / "workspace-template", tmp / "model" / "ws")
            model_env = {**env, "MDMEMORY_CONFIG": str(write_config(tmp / "model", args.model))}
            subprocess.run([*base, "index", "--json"], env=model_env, check=True, stdout=subprocess.DEVNULL)
            runs.append(("search (local model)", [*base, *COMMANDS["search (keyword)"]], model_env))
        cold_ok = can_drop_caches()
        for name, argv, run_env in runs:
            timed(argv, run_env)  # the first run compiles bytecode and warms the cache
            row: dict[str, object] = {"warm": measure(argv, run_env, args.runs, cold=False)}
            row["cold"] = measure(argv, run_env, args.cold_runs, cold=True) if cold_ok else None
            results[name] = row
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), platform.processor())
    print(f"CLI wall time per call, ms ({cpu}, {os.cpu_count()} cores, Python {platform.python_version()})")
    print(f"{'command':24} {'warm p50':>9} {'warm p95':>9} {'cold p50':>9} {'cold p95':>9}")
    for name, row in results.items():
        warm, cold = row["warm"], row["cold"]
        assert isinstance(warm, dict)
        cold_cells = f"{cold['p50']:9.1f} {cold['p95']:9.1f}" if isinstance(cold, dict) else f"{'-':>9} {'-':>9}"
        print(f"{name:24} {warm['p50']:9.1f} {warm['p95']:9.1f} {cold_cells}")
    if not cold_ok:
        print("cold: not measured (dropping the page cache needs root)")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, "results": results}, indent=2))


if __name__ == "__main__":
    main()
