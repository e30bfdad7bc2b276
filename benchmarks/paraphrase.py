"""Score calibration on the paraphrase set (tests/paraphrases.py): do paraphrase questions get their note?

Writes the set's workspace (a MEMORY.md and daily logs, each note among distractors), indexes it with the
real pipeline and prints:

- cosine similarity of each question with every note embedded on its own: the right note ("relevant")
  against all the others ("irrelevant"), as quantiles, and how often the right note has the best cosine;
- for each question through ``Memory.search`` with the shipped query settings: the rank of the right chunk
  at ``minScore 0``, its fused / vector / keyword scores, the best other chunk's score, and whether the
  default search returns it first without low-confidence results (``lowConfidenceResults 0``, the rule
  before) and with them (the shipped default);
- the same for questions the workspace cannot answer (what a nonsense query gets).

    python benchmarks/paraphrase.py [--provider local|hash] [--model PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.memory import Memory  # noqa: E402
from tests.paraphrases import FILES, PAIRS, UNANSWERABLE, note_of, notes  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
LIMIT = 6  # maxResults of the shipped defaults


def quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "min": at(0), "p10": at(0.1), "p50": at(0.5), "p90": at(0.9), "max": at(1.0)}


def open_memory(root: Path, provider: str, model: Path) -> Memory:
    for rel, text in FILES.items():
        path = root / "ws" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    ms: dict[str, Any] = {"provider": provider, "store": {"path": str(root / "index.sqlite")}, "sync": {"watch": False}}
    if provider == "local":
        ms["local"] = {"modelPath": str(model), "modelCacheDir": str(root / "models")}
    config_path = root / "config.json5"
    config_path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(root / "ws"), "memorySearch": ms}}}))
    return Memory.open(config_path=config_path)


def without_low_confidence(mem: Memory) -> Memory:
    """The same index and provider with ``lowConfidenceResults: 0``: the minScore rule before this change."""
    ms = mem.settings
    agent = replace(mem.agent, memory_search=replace(ms, query=replace(ms.query, low_confidence_results=0)))
    return Memory(agent, mem.config, choice=mem.choice)


def cosines(mem: Memory) -> dict[str, Any]:
    provider = mem.choice.provider
    assert provider is not None
    all_notes = notes()
    note_vecs = provider.embed_documents([text for _, text in all_notes])
    relevant: list[float] = []
    irrelevant: list[float] = []
    top = 0
    for pair in PAIRS:
        q = provider.embed_query(pair.query)
        sims = note_vecs @ q
        right = all_notes.index((pair.path, note_of(FILES[pair.path], pair.line)))
        relevant.append(float(sims[right]))
        irrelevant.extend(float(s) for i, s in enumerate(sims) if i != right)
        top += int(np.argmax(sims)) == right
    return {"relevant": quantiles(relevant), "irrelevant": quantiles(irrelevant), "right_note_best": top}


def _lines(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), start=1) if fragment in line)


def holds(result: dict[str, Any], path: str, line: int) -> bool:
    return bool(result["path"] == path and result["startLine"] <= line <= result["endLine"])


def per_query(mem: Memory, before: Memory) -> list[dict[str, Any]]:
    rows = []
    for pair in PAIRS:
        line = _lines(FILES[pair.path], pair.line)
        ranked = mem.search(pair.query, max_results=LIMIT, min_score=0.0)["results"]
        rank = next((i for i, r in enumerate(ranked, start=1) if holds(r, pair.path, line)), None)
        right = ranked[rank - 1] if rank else None
        other = max((r["score"] for r in ranked if r is not right), default=0.0)
        old = before.search(pair.query)["results"]
        new = mem.search(pair.query)
        rows.append(
            {
                "query": pair.query,
                "rank": rank,
                "score": right["score"] if right else None,
                "best_other": other,
                "second_share": round(ranked[1]["score"] / ranked[0]["score"], 3) if len(ranked) > 1 else None,
                "before_first": bool(old) and holds(old[0], pair.path, line),
                "after_first": bool(new["results"]) and holds(new["results"][0], pair.path, line),
                "after_in": any(holds(r, pair.path, line) for r in new["results"]),
                "after_count": len(new["results"]),
                "after_low": sum(bool(r.get("lowConfidence")) for r in new["results"]),
            }
        )
    return rows


def unanswerable(mem: Memory, before: Memory) -> list[dict[str, Any]]:
    rows = []
    for query in UNANSWERABLE:
        ranked = mem.search(query, max_results=LIMIT, min_score=0.0)["results"]
        new = mem.search(query)
        rows.append(
            {
                "query": query,
                "best": ranked[0]["score"] if ranked else None,
                "second_share": round(ranked[1]["score"] / ranked[0]["score"], 3) if len(ranked) > 1 else None,
                "before_count": len(before.search(query)["results"]),
                "after_count": len(new["results"]),
                "after_low": sum(bool(r.get("lowConfidence")) for r in new["results"]),
                "warned": any("minScore" in w for w in new.get("warnings", [])),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", choices=("local", "hash"), default="local")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="GGUF model for provider local")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        mem = open_memory(Path(tmp), args.provider, args.model)
        try:
            mem.sync()
            before = without_low_confidence(mem)
            report = {
                "provider": args.provider,
                "model": mem.choice.provider.model if mem.choice.provider else None,
                "defaults": {"minScore": mem.settings.query.min_score},
                "cosines": cosines(mem),
                "pairs": per_query(mem, before),
                "unanswerable": unanswerable(mem, before),
            }
        finally:
            mem.close()
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def print_report(report: dict[str, Any]) -> None:
    cos = report["cosines"]
    print(f"provider {report['provider']} ({report['model']}), minScore {report['defaults']['minScore']}")
    print(
        f"\ncosine, question vs note embedded alone (right note has the best cosine: {cos['right_note_best']}"
        f"/{len(report['pairs'])})"
    )
    for kind in ("relevant", "irrelevant"):
        print(f"  {kind:10} {cos[kind]}")
    rows = report["pairs"]
    first = [r for r in rows if r["rank"] == 1]
    print(f"\n{'rank':>4} {'score':>6} {'other':>6} {'2nd/1st':>7}  before after  question")
    for r in rows:
        score = f"{r['score']:.3f}" if r["score"] is not None else "-"
        print(
            f"{r['rank'] or '-':>4} {score:>6} {r['best_other']:6.3f} {r['second_share'] or 0:7.3f}  "
            f"{'first' if r['before_first'] else '-':>6} {'first' if r['after_first'] else '-':>5}"
            f" ({r['after_count']}, {r['after_low']} low)  {r['query']}"
        )
    print(
        f"\nright note first at minScore 0: {len(first)}/{len(rows)}; returned first by the default search: "
        f"before {sum(r['before_first'] for r in first)}/{len(first)}, after {sum(r['after_first'] for r in first)}"
        f"/{len(first)}; fused score of the right note when first: {quantiles([r['score'] for r in first])}"
    )
    print(f"right note among the default search's results: {sum(r['after_in'] for r in rows)}/{len(rows)}")
    shares = [r["second_share"] for r in first if r["second_share"] is not None]
    print(f"second/first score when the right note is first: {quantiles(shares)}")
    print(f"\n{'best':>6} {'2nd/1st':>7} before after  unanswerable question")
    for r in report["unanswerable"]:
        print(
            f"{r['best'] or 0:6.3f} {r['second_share'] or 0:7.3f} {r['before_count']:>6} {r['after_count']:>5}"
            f" ({r['after_low']} low{', warned' if r['warned'] else ''})  {r['query']}"
        )
    mean = statistics.mean(r["best"] or 0 for r in report["unanswerable"])
    print(f"mean best score of unanswerable questions: {mean:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
