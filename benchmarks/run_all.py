"""Run every benchmark and write one JSON report plus a plot of search latency against index size.

    python benchmarks/run_all.py [--out benchmarks/out] [--quick]

Runs, each as its own process: search latency (1k/10k/100k chunks), index throughput vs raw
llama-cpp-python, incremental sync, edit-to-searchable watch latency, LoCoMo retrieval quality, the
peak memory of `mdmem watch` with the local MiniLM model, and the wall time of whole CLI commands with
and without a running daemon (cli_latency.py). Prints Markdown tables for the README.
Needs the shared MiniLM GGUF and LoCoMo set beside the repository (../shared) and `matplotlib`
(`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"


def run(name: str, args: list[str], out: Path) -> dict[str, Any]:
    target = out / f"{name}.json"
    started = time.monotonic()
    print(f"-- {name}: {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(HERE / args[0]), *args[1:], "--json", str(target)], check=True, cwd=REPO)
    result = json.loads(target.read_text())
    result["benchmark_seconds"] = round(time.monotonic() - started, 1)
    return result


def watch_peak_memory(out: Path, files: int = 200) -> dict[str, Any]:
    """Peak RSS of `mdmem watch` with the local model: initial index of a workspace, then edits."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws" / "memory"
        ws.mkdir(parents=True)
        for i in range(files):
            (ws / f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}.md").write_text(
                f"# Day {i}\n\n## Notes\n\n"
                + "\n".join(f"- item {i}.{k}: met the team about plan {k}" for k in range(12))
            )
        cfg = root / "cfg.json5"
        ms = {"provider": "local", "local": {"modelPath": str(MODEL)}, "sync": {"watchDebounceMs": 300}}
        cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(root / "ws"), "memorySearch": ms}}}))
        env = {**os.environ, "MDMEMORY_HOME": str(root / "home")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "mdmem", "watch", "--config", str(cfg)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert proc.stdout is not None
        syncs = 0
        started = time.monotonic()
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "sync":
                syncs += 1
                if syncs == 1:
                    initial = time.monotonic() - started
                    for i in range(5):  # a few edits after the initial index
                        with open(ws / "2026-01-01.md", "a") as fh:
                            fh.write(f"\n- edit {i}: the heron came back\n")
                        time.sleep(0.1)
                else:
                    break
        status = Path(f"/proc/{proc.pid}/status").read_text()
        peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return {"files": files, "initial_index_s": round(initial, 1), "peak_rss_mb": round(peak_kb / 1024, 1)}


def plot(search: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(int(n) for n in search["results"])
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for mode, style in (("hybrid", "o-"), ("vector", "s--"), ("keyword", "^:")):
        for stat, alpha in (("p50_ms", 1.0), ("p95_ms", 0.45)):
            ys = [search["results"][str(n)][mode][stat] for n in sizes]
            ax.plot(sizes, ys, style, alpha=alpha, label=f"{mode} {stat.split('_')[0]}")
    ax.set_xscale("log")
    ax.set_xlabel("chunks in the index (384-dim vectors)")
    ax.set_ylabel("search latency, ms")
    ax.set_title(f"mdmem search latency ({search['date']}, 2 cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path)


def markdown(report: dict[str, Any]) -> str:
    s = report["search_latency"]
    lines = ["| chunks | vector p50 / p95 ms | keyword p50 / p95 ms | hybrid p50 / p95 ms |", "|---|---|---|---|"]
    for n in sorted(s["results"], key=int):
        r = s["results"][n]
        cells = [f"{r[m]['p50_ms']:.1f} / {r[m]['p95_ms']:.1f}" for m in ("vector", "keyword", "hybrid")]
        lines.append(f"| {int(n):,} | " + " | ".join(cells) + " |")
    t, inc, w, mem = report["index_throughput"], report["incremental"], report["watch_latency"], report["watch_memory"]
    lines += [
        "",
        f"- index throughput ({t['chunks']} chunks, {t['embedded']} embedding inputs): mdmem "
        f"{t['mdmemory_chunks_per_s']} chunks/s vs raw llama-cpp-python {t['raw_chunks_per_s']} chunks/s on the "
        f"same texts; ratio {t['ratio']} (target <= 1.10)",
        f"- incremental: edit 1 of {inc['files']} files: sync {inc['sync_ms']} ms vs embedding only the changed "
        f"inputs {inc['embed_only_ms']} ms; ratio {inc['ratio']} (target <= 1.5)",
        f"- watch latency ({w['mode']}, debounce {w['debounce_s']} s): p50 {w['p50_s']} s, p95 {w['p95_s']} s "
        f"(target <= {w['target_s']} s)",
        f"- `mdmem watch` with MiniLM, {mem['files']} files: peak RSS {mem['peak_rss_mb']} MB",
    ]
    cli = report["cli_latency"]["results"]
    lines += ["", "| command | warm p50 / p95 ms | cold p50 / p95 ms |", "|---|---|---|"]
    for name, r in cli.items():
        cold = f"{r['cold']['p50']:.0f} / {r['cold']['p95']:.0f}" if r["cold"] else "-"
        lines.append(f"| {name} | {r['warm']['p50']:.0f} / {r['warm']['p95']:.0f} | {cold} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "out")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    sizes = ["1000", "10000"] if args.quick else ["1000", "10000", "100000"]
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    report["search_latency"] = run("search_latency", ["search_latency.py", "--sizes", *sizes], out)
    report["index_throughput"] = run("index_throughput", ["index_throughput.py"], out)
    report["incremental"] = run("incremental", ["incremental.py", "--files", "300" if args.quick else "1000"], out)
    report["watch_latency"] = run("watch_latency", ["watch_latency.py"], out)
    report["locomo"] = run("locomo", ["locomo.py"], out)
    report["watch_memory"] = watch_peak_memory(out)
    runs = ["--runs", "5", "--cold-runs", "2"] if args.quick else ["--runs", "20", "--cold-runs", "5"]
    report["cli_latency"] = run("cli_latency", ["cli_latency.py", *runs, "--model", str(MODEL)], out)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    plot(report["search_latency"], out / "search_latency.png")
    print(markdown(report))
    print(f"\nwrote {out / 'report.json'} and {out / 'search_latency.png'}")


if __name__ == "__main__":
    main()
