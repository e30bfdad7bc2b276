"""What the truth feature costs a search that has nothing to do with it: LoCoMo recall and search latency with
``query.currentFirst`` on (grouping, frames, the current line brought in) and off, on one index, one run.

The LoCoMo dev workspace (``benchmarks/locomo.py`` writes it) is indexed once with the shared MiniLM GGUF (or
``--provider none``). Two memories open the same index, one with ``query.currentFirst: false``. Every question
is searched by both, alternately (load from other processes hits both alike), query vectors computed once
before timing. Prints R@1/5/10, MRR and the search p50/p95 of each, and the ratio of the p50s.

    python benchmarks/truth_cost.py [--provider local|none] [--json out.json]
"""

from __future__ import annotations

import json
import platform
import statistics
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


def open_memory(root: Path, workspace: Path, model: Path, provider: str, current_first: bool) -> Memory:
    settings = [("memorySearch.query.currentFirst", current_first)]
    return Memory.open(
        config_path=locomo.write_cost_config(root, workspace, model, provider, str(current_first), settings)
    )


def main(argv: list[str] | None = None) -> int:
    args = locomo.cost_arguments(__doc__.split("\n")[0], sample=False).parse_args(argv)
    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="mdm-truth-cost-") as tmp:
        root = Path(tmp)
        where = locomo.write_workspace(conversations, root / "ws")
        questions = locomo.build_questions(conversations, where, None).questions
        mems = {on: open_memory(root, root / "ws", args.model, args.provider, on) for on in (False, True)}
        mems[False].sync()
        for mem in mems.values():
            memoise_queries(mem, [q.text for q in questions])
        times: dict[bool, list[float]] = {False: [], True: []}
        scores: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for i, q in enumerate(questions):
            for on in (False, True) if i % 2 else (True, False):
                started = time.perf_counter()
                found = mems[on].search(q.text, max_results=locomo.MAX_RESULTS, min_score=0.0)["results"]
                times[on].append(1000 * (time.perf_counter() - started))
                scores[on].append(locomo.score([(r["path"], r["startLine"], r["endLine"]) for r in found], q.gold))
        for mem in mems.values():
            mem.close()
    out: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "questions": len(questions)}
    for on in (False, True):
        name = "currentFirst" if on else "without"
        figures = {k: round(statistics.fmean(s[k] for s in scores[on]), 3) for k in scores[on][0]}
        figures |= {"p50ms": round(percentile(times[on], 0.5), 2), "p95ms": round(percentile(times[on], 0.95), 2)}
        out[name] = figures
        print(name, json.dumps(figures), flush=True)
    out["p50Ratio"] = round(out["currentFirst"]["p50ms"] / out["without"]["p50ms"], 3)
    print("p50 ratio", out["p50Ratio"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
