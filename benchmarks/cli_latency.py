"""Wall time of whole ``mdmem`` commands, as a runtime that shells out per tool call pays it.

Copies ``workspace-template/`` to a temporary workspace, indexes it once, then runs each command as a new
process (``python -m mdmem ...`` with the project's interpreter) ``--runs`` times and prints p50 / p95 in
milliseconds. "warm" runs back to back; "cold" drops the page cache before each run (needs root: writes
``/proc/sys/vm/drop_caches``; skipped with a note otherwise). Keyword-only (``provider: "none"``) unless
``--model`` names a GGUF, which adds ``search`` with the local model (query embedding included).
Then the same ``search``, ``get`` and ``pack`` again with ``mdmem watch`` running for the agent, which
answers them over its socket (mdmem.cli.entry, mdmem.runtime.ipc_server); ``get`` also through the console script.
Targets (issue 14): keyword-only ``search`` p50 <= 150 ms, ``get`` p50 <= 100 ms, and ``search`` with the
local model through a running daemon <= 60 ms.

    python benchmarks/cli_latency.py [--runs 20] [--cold-runs 5] [--model PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
DAEMON_COMMANDS = ("search (keyword)", "get", "pack (keyword)")


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


@contextmanager
def watch_daemon(base: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    """``mdmem watch`` for the config in ``env``, from its socket being up until the block ends."""
    with open(log, "w") as out:
        proc = subprocess.Popen([*base, "watch"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while '"event": "socket"' not in log.read_text() or '"event": "sync"' not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mdmem watch did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def row(argv: list[str], env: dict[str, str], runs: int, cold_runs: int, cold_ok: bool) -> dict[str, object]:
    timed(argv, env)  # the first run compiles bytecode and warms the cache (and, with a daemon, its model)
    warm = measure(argv, env, runs, cold=False)
    return {"warm": warm, "cold": measure(argv, env, cold_runs, cold=True) if cold_ok else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--model", type=Path, help="a GGUF embedding model: also time search with it")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    load_before = os.getloadavg()
    cold_ok = can_drop_caches()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        shutil.copytree(ROOT / "workspace-template", tmp / "ws")
        env = {**os.environ, "MDMEMORY_CONFIG": str(write_config(tmp, None)), "PYTHONPATH": str(ROOT)}
        env["MDMEMORY_HOME"] = str(tmp / "home")
        env.pop("OPENAI_API_KEY", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure as installed: bytecode cached after the first run
        env.pop("MDMEMORY_DAEMON", None)
        base = [sys.executable, "-m", "mdmem"]
        script = Path(sys.executable).parent / "mdmem"
        subprocess.run([*base, "index", "--json"], env=env, check=True, stdout=subprocess.DEVNULL)
        for name, argv in COMMANDS.items():
            results[name] = row([*base, *argv], env, args.runs, args.cold_runs, cold_ok)
        if script.exists():
            results["get (console script)"] = row(
                [str(script), *COMMANDS["get"]], env, args.runs, args.cold_runs, cold_ok
            )
        with watch_daemon(base, env, tmp / "watch.log"):
            for name in DAEMON_COMMANDS:
                results[f"{name} via daemon"] = row([*base, *COMMANDS[name]], env, args.runs, args.cold_runs, cold_ok)
            if script.exists():
                argv = [str(script), *COMMANDS["get"]]
                results["get via daemon (console script)"] = row(argv, env, args.runs, args.cold_runs, cold_ok)
        if args.model is not None:
            shutil.copytree(ROOT / "workspace-template", tmp / "model" / "ws")
            model_env = {**env, "MDMEMORY_CONFIG": str(write_config(tmp / "model", args.model))}
            subprocess.run([*base, "index", "--json"], env=model_env, check=True, stdout=subprocess.DEVNULL)
            argv = [*base, *COMMANDS["search (keyword)"]]
            results["search (local model)"] = row(argv, model_env, args.runs, args.cold_runs, cold_ok)
            with watch_daemon(base, model_env, tmp / "model-watch.log"):
                results["search (local model) via daemon"] = row(argv, model_env, args.runs, args.cold_runs, cold_ok)
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), platform.processor())
    load = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    print(f"CLI wall time per call, ms ({cpu}, {os.cpu_count()} cores, Python {platform.python_version()})")
    print(f"load average (1/5/15 min) before {load['before']}, after {load['after']}")
    print(f"{'command':36} {'warm p50':>9} {'warm p95':>9} {'cold p50':>9} {'cold p95':>9}")
    for name, r in results.items():
        warm, cold = r["warm"], r["cold"]
        assert isinstance(warm, dict)
        cold_cells = f"{cold['p50']:9.1f} {cold['p95']:9.1f}" if isinstance(cold, dict) else f"{'-':>9} {'-':>9}"
        print(f"{name:36} {warm['p50']:9.1f} {warm['p95']:9.1f} {cold_cells}")
    if not cold_ok:
        print("cold: not measured (dropping the page cache needs root)")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu, "load": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
