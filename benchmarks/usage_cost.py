"""What use tracking costs a search: LoCoMo search latency with ``usage.enabled`` off and on (the default
``flushSeconds``: counts kept in memory, written at most every 30 s), and, for scale, with ``flushSeconds: 0``
(one write per search: what batching saves), on one index, one run.

The LoCoMo dev workspace (``benchmarks/locomo.py`` writes it) is indexed once with the shared MiniLM GGUF (or
``--provider none``). Memories with each setting open the same index; every question is searched by each in
turn, the order rotating per question (load from other processes hits all alike), query vectors computed once
before timing. Prints the search p50/p95 of each and the ratio of the p50s to tracking off (the issue's bar:
at most 1.05 with the default settings), and that the counts were written (rows in the usage table).

    python benchmarks/usage_cost.py [--provider local|none] [--questions N] [--json out.json]
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from pack_latency import memoise_queries, percentile  # noqa: E402

from mdmem.memory import Memory  # noqa: E402

MODES: dict[str, list[tuple[str, Any]]] = {
    "off": [("memorySearch.usage.enabled", False)],
    "on": [],  # the defaults
    "flushEveryUse": [("memorySearch.usage.flushSeconds", 0)],
}


def open_memory(root: Path, workspace: Path, model: Path, provider: str, mode: str) -> Memory:
    return Memory.open(config_path=locomo.write_cost_config(root, workspace, model, provider, mode, MODES[mode]))


def main(argv: list[str] | None = None) -> int:
    args = locomo.cost_arguments(__doc__.split("\n")[0]).parse_args(argv)
    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="mdm-usage-cost-") as tmp:
        root = Path(tmp)
        questions = locomo.dev_questions(conversations, root / "ws", args.questions)
        names = list(MODES)
        with open_memory(root, root / "ws", args.model, args.provider, "off") as builder:  # none of the timed ones
            builder.sync()
        mems = {name: open_memory(root, root / "ws", args.model, args.provider, name) for name in names}
        for mem in mems.values():
            memoise_queries(mem, [q.text for q in questions])
            mem.search(questions[0].text)  # warm: the index opened, caches filled
        times: dict[str, list[float]] = {name: [] for name in names}
        for i, q in enumerate(questions):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                started = time.perf_counter()
                mems[name].search(q.text, max_results=locomo.MAX_RESULTS, min_score=0.0)
                times[name].append(1000 * (time.perf_counter() - started))
        for mem in mems.values():
            mem.close()
        check = open_memory(root, root / "ws", args.model, "none", "off")
        rows = len(check.store.usage_rows())
        check.close()
    out: dict[str, Any] = {
        "machine": platform.processor() or platform.machine(),
        "provider": args.provider,
        "questions": len(questions),
        "usageRows": rows,
    }
    for name in names:
        out[name] = {"p50ms": round(percentile(times[name], 0.5), 3), "p95ms": round(percentile(times[name], 0.95), 3)}
        print(name, json.dumps(out[name]), flush=True)
    for name in names[1:]:
        out[f"{name}P50Ratio"] = round(out[name]["p50ms"] / out["off"]["p50ms"], 3)
        print(f"{name} p50 ratio to off", out[f"{name}P50Ratio"])
    print("usage rows written", rows)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
