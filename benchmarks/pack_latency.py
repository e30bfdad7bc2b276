"""Pack latency: ``Memory.pack`` against the search it runs, p50/p95, query embedding excluded.

The LoCoMo dev workspace (the same one ``benchmarks/locomo.py`` writes: 119 daily logs, 2,760 turns) is
indexed with the shared MiniLM GGUF (or the provider given), then for a sample of its questions:

- ``search``: ``Memory._search`` with the pack's wider net (``packer.candidate_count``) and minScore 0, which
  is exactly the search ``Memory.pack`` runs (refresh, embedding, hybrid search);
- ``pack``: ``Memory.pack(question, budget_tokens=B)``: that search plus window similarities, file reads,
  trimming, selection and the exact token count of the bundle.

Query vectors are computed once before timing (the provider's ``embed_query`` is memoised for the run),
so both sides exclude the embedding. The two are timed alternately, question by question, so load from
other processes hits both alike. Target: pack p50 <= 1.5 x search p50.

    python benchmarks/pack_latency.py [--budgets 500 1000 2000] [--questions 300] [--workdir DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import locomo  # noqa: E402
from mdmem.engine.packing import candidate_count  # noqa: E402
from mdmem.memory import Memory  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def memoise_queries(mem: Memory, questions: list[str]) -> None:
    """Embed every question once; later embed_query calls for them return the stored vector."""
    provider = mem.choice.provider
    if provider is None:
        return
    embed = provider.embed_query
    vectors = {q: embed(q) for q in questions}
    provider.embed_query = lambda text: vectors[text] if text in vectors else embed(text)  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=locomo.DEFAULT_MODEL)
    ap.add_argument("--provider", choices=["local", "none"], default="local")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000])
    ap.add_argument("--questions", type=int, default=300, help="sample size (every k-th question)")
    ap.add_argument("--workdir", type=Path, help="reuse the workspace and index of benchmarks/locomo.py --workdir")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="pack-latency-") as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        os.environ["MDMEMORY_HOME"] = str(root / "home")
        workspace = root / "workspace"
        where = locomo.write_workspace(conversations, workspace)
        questions = [q.text for q in locomo.build_questions(conversations, where, None).questions]
        step = max(1, len(questions) // args.questions)
        sample = questions[::step][: args.questions]
        name = "hybrid" if args.provider == "local" else "keyword"
        tree = locomo.config_tree(workspace, args.model.resolve(), locomo.retriever_settings(name, args.provider, []))
        key = locomo.index_key(tree)
        store = root / f"index-{hashlib.sha1(key.encode()).hexdigest()[:10]}.sqlite"
        locomo.set_path(tree, "agents.defaults.memorySearch.store.path", str(store))
        config = root / f"{name}-latency.json5"
        config.write_text(json.dumps(tree, indent=2), encoding="utf-8")
        report: dict[str, Any] = {
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.platform()}",
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"),
            "questions": len(sample),
            "budgets": {},
        }
        with Memory.open(config_path=config) as mem:
            mem.sync()
            memoise_queries(mem, sample)
            max_results = mem.settings.query.max_results
            for budget in args.budgets:
                net = candidate_count(max_results, budget)
                for q in sample[:20]:  # warm caches (SQLite pages, files, the tokenizer)
                    mem.engine.search_outcome(q, net, 0.0)
                    mem.pack(q, budget_tokens=budget)
                search_ms: list[float] = []
                pack_ms: list[float] = []
                for i, q in enumerate(sample):
                    order = ("search", "pack") if i % 2 else ("pack", "search")
                    for what in order:
                        started = time.perf_counter()
                        if what == "search":
                            mem.engine.search_outcome(q, net, 0.0)
                            search_ms.append(1000 * (time.perf_counter() - started))
                        else:
                            mem.pack(q, budget_tokens=budget)
                            pack_ms.append(1000 * (time.perf_counter() - started))
                s50, p50 = statistics.median(search_ms), statistics.median(pack_ms)
                figures = {
                    "candidates": net,
                    "searchP50": round(s50, 2),
                    "searchP95": round(percentile(search_ms, 0.95), 2),
                    "packP50": round(p50, 2),
                    "packP95": round(percentile(pack_ms, 0.95), 2),
                    "ratioP50": round(p50 / s50, 3),
                }
                report["budgets"][str(budget)] = figures
                print(
                    f"budget {budget:>5} ({net} candidates, {mem.choice.name}): search p50 {s50:.2f} ms "
                    f"(p95 {figures['searchP95']:.2f}), pack p50 {p50:.2f} ms (p95 {figures['packP95']:.2f}), "
                    f"pack/search p50 {figures['ratioP50']:.2f}"
                )
    print(f"{report['machine']}; Python {report['python']}; {report['date']}; {len(sample)} questions")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
