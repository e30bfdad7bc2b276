"""Retrieval quality on the LoCoMo dev set: recall@1/5/10 and MRR of ``Memory.search``, per category.

All dev conversations become ONE memory workspace (the realistic haystack): one ``memory/YYYY-MM-DD.md``
per date, each session under ``## <time> on <date> — <speakers>``, one ``Speaker: text`` line per turn
(image turns add ``[shares a photo: caption]``), no dialog ids. The workspace is indexed with mdmem's
real pipeline (a config file, ``Memory.open``, ``sync``) and every question goes through ``Memory.search``.

Metric (../shared/bench/locomo/README.md): gold = the lines of a question's evidence turns; recall@k =
fraction of gold lines inside the top-k returned (path, startLine..endLine) ranges; MRR = 1/rank of the
first result holding any gold line (0 when none in the top 10). Averaged over questions of categories
1-4 (overall and per category); category 5 (adversarial) is reported separately. Searches use
``max_results=10, min_score=0``: ``minScore`` is a presentation threshold, not part of the ranking, and
any threshold would only hide results from recall@10.

Retrievers: ``keyword`` (an index built with provider none), ``vector`` (hybrid.enabled false) and
``hybrid`` (the configuration under test). Indexes are built once per index-relevant configuration and
shared by retrievers that differ only in query settings. Figures are also split into the ``tune``
conversations (conv-26, conv-30) and the ``confirm`` ones (conv-41, conv-42, conv-43); the haystack is
the same for both.

With ``--pack`` every question is also packed (``Memory.pack``) at 500, 1,000 and 2,000 tokens: pack
recall next to whole top-ranked chunks filling the same budget (benchmarks/locomo_pack.py).

    python benchmarks/locomo.py [--provider local|none] [--fusion rrf] [--tokens 400 --overlap 80]
        [--set memorySearch.query.hybrid.rrfK=30 ...] [--retrievers keyword hybrid] [--pack] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.locomo_pack import PackRecall, pack_table  # noqa: E402
from mdmem.memory import Memory  # noqa: E402
from mdmem.util.errors import MdMemoryError  # noqa: E402
from mdmem.util.tokens import estimate_tokens  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SCORED = (1, 2, 3, 4)
SPLITS = {"tune": ("conv-26", "conv-30"), "confirm": ("conv-41", "conv-42", "conv-43")}
KS = (1, 5, 10)
METRICS = tuple(f"r@{k}" for k in KS) + ("mrr",)
MAX_RESULTS = max(KS)
RETRIEVERS = ("keyword", "vector", "hybrid")
DIALOG_ID = re.compile(r"\bD:?\d+:\d+\b")
_EVIDENCE_ID = re.compile(r"D:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")

Line = tuple[str, int]  # (workspace-relative path, 1-based line)


# -- dataset -> workspace (pure apart from writing files) --------------------------------------------
def parse_evidence(raw: Iterable[str]) -> tuple[list[str], int]:
    """Dialog ids in canonical form ("D30:05" -> "D30:5", "D:11:26" -> "D11:26", "D8:6; D9:17" -> two ids),
    de-duplicated in order, and the number of evidence strings holding no id at all."""
    ids: dict[str, None] = {}
    unparsable = 0
    for item in raw:
        found = _EVIDENCE_ID.findall(item)
        unparsable += not found
        for session, turn in found:
            ids.setdefault(f"D{int(session)}:{int(turn)}", None)
    return list(ids), unparsable


def session_datetime(text: str) -> datetime:
    """Parse a session stamp such as ``1:56 pm on 8 May, 2023``."""
    return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")


def turn_line(turn: dict[str, Any]) -> str:
    """One line for a turn: ``Speaker: text [shares a photo: caption]``; newlines in the text collapse."""
    text = " ".join(str(turn.get("text", "")).split())
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return f"{turn['speaker']}: {text}"


@dataclass(frozen=True)
class Session:
    sample_id: str
    when: datetime
    heading: str
    turns: tuple[dict[str, Any], ...]


def sessions(conversations: Sequence[dict[str, Any]]) -> list[Session]:
    """Every session with turns, ordered by date and time (ties: dataset order)."""
    out: list[tuple[datetime, int, Session]] = []
    for order, conv in enumerate(conversations):
        c = conv["conversation"]
        speakers = f"{c['speaker_a']} and {c['speaker_b']}"
        for key, turns in c.items():
            m = _SESSION_KEY.fullmatch(key)
            if not m or not turns:
                continue
            stamp = " ".join(c[f"{key}_date_time"].split())
            when = session_datetime(stamp)
            session = Session(conv["sample_id"], when, f"## {stamp} — {speakers}", tuple(turns))
            out.append((when, order * 1000 + int(m[1]), session))
    return [s for _, _, s in sorted(out, key=lambda t: t[:2])]


def write_workspace(conversations: Sequence[dict[str, Any]], root: Path) -> dict[tuple[str, str], Line]:
    """Write the daily logs under ``root/memory``; returns (sample_id, dia_id) -> (path, line)."""
    files: dict[str, list[str]] = defaultdict(list)
    where: dict[tuple[str, str], Line] = {}
    for s in sessions(conversations):
        rel = f"memory/{s.when:%Y-%m-%d}.md"
        lines = files[rel]
        if lines:
            lines.append("")
        lines += [s.heading, ""]
        for turn in s.turns:
            lines.append(turn_line(turn))
            where[(s.sample_id, turn["dia_id"])] = (rel, len(lines))
    for rel, lines in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where


# -- questions and the metric (pure) -------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    sample_id: str
    text: str
    category: int
    gold: frozenset[Line]


@dataclass
class QuestionSet:
    questions: list[Question] = field(default_factory=list)
    missing_ids: int = 0  # evidence ids that name no turn
    unparsable: int = 0  # evidence strings holding no id
    no_gold: int = 0  # questions skipped: no valid evidence line


def build_questions(
    conversations: Sequence[dict[str, Any]], where: dict[tuple[str, str], Line], max_per_conversation: int | None
) -> QuestionSet:
    out = QuestionSet()
    for conv in conversations:
        for qa in conv["qa"][:max_per_conversation]:
            ids, bad = parse_evidence(qa.get("evidence", []))
            out.unparsable += bad
            gold = {where[(conv["sample_id"], i)] for i in ids if (conv["sample_id"], i) in where}
            out.missing_ids += sum((conv["sample_id"], i) not in where for i in ids)
            if not gold:
                out.no_gold += 1
                continue
            out.questions.append(Question(conv["sample_id"], qa["question"], int(qa["category"]), frozenset(gold)))
    return out


Scored = list[tuple[Question, dict[str, float]]]  # a question and its recall@k / reciprocal rank


def score(ranges: Sequence[tuple[str, int, int]], gold: frozenset[Line]) -> dict[str, float]:
    """recall@k for k in KS and the reciprocal rank (within the top MAX_RESULTS) of one ranked list."""
    top = list(ranges[:MAX_RESULTS])

    def covered(results: Sequence[tuple[str, int, int]]) -> set[Line]:
        return {g for g in gold if any(p == g[0] and start <= g[1] <= end for p, start, end in results)}

    out = {f"r@{k}": len(covered(top[:k])) / len(gold) for k in KS}
    first = next((rank for rank, r in enumerate(top, start=1) if covered([r])), 0)
    out["mrr"] = 1.0 / first if first else 0.0
    return out


def aggregate(rows: Scored) -> dict[str, dict[str, dict[str, float]]]:
    """{split: {group: {metric: mean, "n": count}}}; groups are the category names and "overall" (1-4)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for split, members in {"all": None, **SPLITS}.items():
        groups: dict[str, list[dict[str, float]]] = defaultdict(list)
        for q, s in rows:
            if members is not None and q.sample_id not in members:
                continue
            groups[CATEGORIES[q.category]].append(s)
            if q.category in SCORED:
                groups["overall"].append(s)
        out[split] = {
            g: {"n": len(v), **{m: statistics.fmean(x[m] for x in v) for m in v[0]}} for g, v in groups.items()
        }
    return out


# -- configuration ---------------------------------------------------------------------------------------
def parse_set(text: str) -> tuple[str, Any]:
    """``key.path=value`` with a JSON value (a bare word that is not JSON is a string)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key.path=value, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``tree[a][b][c] = value`` for ``"a.b.c"``, creating objects on the way."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
        if not isinstance(tree, dict):
            raise ValueError(f"{dotted}: {part} is not an object")
    tree[leaf] = value


def retriever_settings(name: str, provider: str, overrides: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Settings (paths under ``agents.defaults``) of one retriever: CLI overrides, then what defines it."""
    own = {
        "keyword": [("memorySearch.provider", "none")],
        "vector": [("memorySearch.provider", provider), ("memorySearch.query.hybrid.enabled", False)],
        "hybrid": [("memorySearch.provider", provider)],
    }[name]
    return [*overrides, *own]


def cost_arguments(description: str, *, sample: bool = True) -> argparse.ArgumentParser:
    """The cost benchmarks' common arguments: the data, the model, the provider, a sample size, a JSON file."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--provider", choices=["local", "none"], default="local")
    if sample:
        ap.add_argument("--questions", type=int, default=0, help="sample size (every k-th question; 0: all)")
    ap.add_argument("--json", type=Path)
    return ap


def write_cost_config(
    root: Path,
    workspace: Path,
    model: Path,
    provider: str,
    name: str,
    settings: Sequence[tuple[str, Any]],
    top: dict[str, Any] | None = None,
) -> Path:
    """``root/config-<name>.json``: the cost benchmarks' config, their one index at ``root/index.sqlite``;
    ``settings`` under ``agents.defaults``, ``top`` (dotted paths) from the file's top."""
    base = [("memorySearch.provider", provider), ("memorySearch.store.path", str(root / "index.sqlite"))]
    tree = config_tree(workspace, model, [*base, *settings])
    for key, value in (top or {}).items():
        set_path(tree, key, value)
    config = root / f"config-{name}.json"
    config.write_text(json.dumps(tree), encoding="utf-8")
    return config


def dev_questions(conversations: list[dict[str, Any]], workspace: Path, sample: int = 0) -> list[Any]:
    """The cost benchmarks' set-up: the workspace written, its questions, every k-th of them when ``sample``
    (0: all)."""
    where = write_workspace(conversations, workspace)
    questions = build_questions(conversations, where, None).questions
    if sample and len(questions) > sample:
        questions = questions[:: len(questions) // sample][:sample]
    return list(questions)


def config_tree(workspace: Path, model: Path, settings: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The config file: the workspace, the local model, no background syncing, then ``settings``."""
    defaults: dict[str, Any] = {
        "workspace": str(workspace),
        "memorySearch": {
            "local": {"modelPath": str(model), "threads": os.cpu_count() or 1},
            # The workspace never changes during a run: no hash check of ~150 files before every search.
            "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
        },
    }
    for key, value in settings:
        set_path(defaults, key, value)
    return {"agents": {"defaults": defaults}}


def index_key(tree: dict[str, Any]) -> str:
    """What decides the index: everything but query-time settings."""
    ms = copy.deepcopy(tree["agents"]["defaults"].get("memorySearch", {}))
    ms.pop("query", None)
    ms.pop("store", None)
    return json.dumps(ms, sort_keys=True)


# -- running -------------------------------------------------------------------------------------------
def chunk_stats(mem: Memory) -> dict[str, float]:
    rows = [c for path in sorted(mem.store.files()) for c in mem.store.chunks_of(path)]
    lines = [c.end_line - c.start_line + 1 for c in rows]
    return {
        "chunks": len(rows),
        "meanLinesPerChunk": round(statistics.fmean(lines), 1) if rows else 0.0,
        "meanTokensPerChunk": round(statistics.fmean(estimate_tokens(c.text) for c in rows), 1) if rows else 0.0,
    }


def run_retriever(
    config: Path, questions: Sequence[Question], pack_workspace: Path | None = None
) -> tuple[Scored, dict[str, Any]]:
    """Open the memory the config describes, sync it (a no-op when the shared index is built), ask every
    question; returns per-question scores and timings. With ``pack_workspace`` every question is also packed."""
    with Memory.open(config_path=config) as mem:
        started = time.perf_counter()
        report = mem.sync()
        sync_seconds = time.perf_counter() - started
        rows = []
        modes: dict[str, None] = {}
        warnings: dict[str, None] = {}
        started = time.perf_counter()
        for q in questions:
            response = mem.search(q.text, max_results=MAX_RESULTS, min_score=0.0)
            modes.setdefault(response["mode"], None)
            warnings.update(dict.fromkeys(response.get("warnings", [])))
            ranges = [(r["path"], r["startLine"], r["endLine"]) for r in response["results"]]
            rows.append((q, score(ranges, q.gold)))
        search_seconds = time.perf_counter() - started
        if pack_workspace is not None:
            packer = PackRecall(mem, pack_workspace)
            started = time.perf_counter()
            for q, s in rows:
                top5 = mem.search(q.text, max_results=5, min_score=0.0)["results"]
                s["r5Tokens"] = packer.top_tokens([(r["path"], r["startLine"], r["endLine"]) for r in top5])
                s.update(packer.scores(q.text, q.gold))
            print(f"  packed {len(rows)} questions at 3 budgets in {time.perf_counter() - started:.1f} s")
        info = {
            "modes": list(modes),
            "warnings": list(warnings)[:5],
            "syncSeconds": round(sync_seconds, 2),
            "embedded": report["embedded"],
            "searchSeconds": round(search_seconds, 2),
            "msPerQuery": round(1000 * search_seconds / max(1, len(questions)), 1),
        }
        return rows, info | {"chunkStats": chunk_stats(mem)}


def table(title: str, figures: dict[str, dict[str, dict[str, dict[str, float]]]], split: str) -> str:
    names = list(figures)
    head = f"{'':12} {'n':>4}  " + "  ".join(f"{n:^27}" for n in names)
    sub = f"{'':12} {'':>4}  " + "  ".join(" ".join(f"{m.upper():>6}" for m in METRICS) for _ in names)
    out = [title, head, sub]
    for group in [CATEGORIES[c] for c in SCORED] + ["overall", CATEGORIES[5]]:
        cells = [figures[n][split].get(group) for n in names]
        n = next((c["n"] for c in cells if c), 0)
        if group == CATEGORIES[5]:
            out.append("  (category 5 is not in overall)")
        vals = "  ".join(" ".join(f"{c[m]:6.3f}" for m in METRICS) if c else " " * 27 for c in cells)
        out.append(f"{group:12} {n:>4}  {vals}")
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo-dev.json")
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="GGUF model for provider local")
    ap.add_argument("--provider", choices=["local", "none"], default="local", help="provider of vector/hybrid")
    ap.add_argument("--fusion", choices=["weighted", "rrf"], help="memorySearch.query.hybrid.fusion")
    ap.add_argument("--vector-weight", type=float, help="memorySearch.query.hybrid.vectorWeight")
    ap.add_argument("--text-weight", type=float, help="memorySearch.query.hybrid.textWeight")
    ap.add_argument("--tokens", type=int, help="memorySearch.chunking.tokens")
    ap.add_argument("--overlap", type=int, help="memorySearch.chunking.overlap")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        type=parse_set,
        metavar="KEY=JSON",
        help="any config key under agents.defaults, e.g. memorySearch.query.hybrid.rrfK=30 (repeatable)",
    )
    ap.add_argument("--retrievers", nargs="+", choices=RETRIEVERS, default=list(RETRIEVERS))
    ap.add_argument("--pack", action="store_true", help="also measure pack recall at 500/1000/2000 tokens")
    ap.add_argument("--conversations", nargs="+", help="sample ids (haystack and questions; for quick runs)")
    ap.add_argument("--max-questions", type=int, help="at most N questions per conversation (quick runs)")
    ap.add_argument("--workdir", type=Path, help="keep workspace and indexes here (reused by later runs)")
    ap.add_argument("--json", type=Path, help="write every figure (and per-question results) here")
    return ap.parse_args(argv)


def overrides_of(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """The named options as ``--set`` pairs, then the ``--set`` pairs themselves (later ones win)."""
    named = {
        "memorySearch.query.hybrid.fusion": args.fusion,
        "memorySearch.query.hybrid.vectorWeight": args.vector_weight,
        "memorySearch.query.hybrid.textWeight": args.text_weight,
        "memorySearch.chunking.tokens": args.tokens,
        "memorySearch.chunking.overlap": args.overlap,
    }
    return [(k, v) for k, v in named.items() if v is not None] + list(args.sets)


def main(argv: Sequence[str] | None = None) -> int:
    wall = time.perf_counter()
    args = parse_args(argv)
    overrides = overrides_of(args)
    retrievers = [r for r in RETRIEVERS if r in args.retrievers]
    if args.provider == "none" and retrievers != ["keyword"]:
        print("provider none: only the keyword retriever is run", file=sys.stderr)
        retrievers = ["keyword"]
    if args.provider == "local" and any(r != "keyword" for r in retrievers) and not args.model.is_file():
        sys.exit(f"model {args.model} not found: pass --model FILE.gguf, or --provider none")

    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    if args.conversations:
        conversations = [c for c in conversations if c["sample_id"] in set(args.conversations)]
        if not conversations:
            sys.exit(f"no conversation in {args.data} is named {' '.join(args.conversations)}")

    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        os.environ["MDMEMORY_HOME"] = str(root / "home")
        workspace = root / "workspace"
        where = write_workspace(conversations, workspace)
        texts = [p.read_text(encoding="utf-8") for p in sorted((workspace / "memory").glob("*.md"))]
        leaked = sum(len(DIALOG_ID.findall(t)) for t in texts)
        qs = build_questions(conversations, where, args.max_questions)
        print(
            f"workspace: {len(conversations)} conversations, {len(where)} turns, {len(texts)} daily files, "
            f"~{sum(estimate_tokens(t) for t in texts) // max(1, len(where))} tokens per turn line, "
            f"dialog ids in the text: {leaked}"
        )
        print(
            f"questions: {len(qs.questions)} with gold lines; skipped {qs.no_gold} without valid evidence; "
            f"{qs.missing_ids} evidence ids name no turn, {qs.unparsable} evidence strings hold no id"
        )
        print("settings:", json.dumps(dict(overrides)) if overrides else "config defaults")

        indexes: dict[str, Path] = {}
        figures: dict[str, Any] = {}
        report: dict[str, Any] = {"retrievers": {}}
        for name in retrievers:
            settings = retriever_settings(name, args.provider, overrides)
            tree = config_tree(workspace, args.model.resolve(), settings)
            key = index_key(tree)
            store = indexes.setdefault(key, root / f"index-{hashlib.sha1(key.encode()).hexdigest()[:10]}.sqlite")
            set_path(tree, "agents.defaults.memorySearch.store.path", str(store))
            config = root / f"{name}.json5"
            config.write_text(json.dumps(tree, indent=2), encoding="utf-8")
            try:
                rows, info = run_retriever(config, qs.questions, workspace if args.pack else None)
            except MdMemoryError as exc:
                sys.exit(f"{name}: {exc}")
            figures[name] = aggregate(rows)
            stats = info["chunkStats"]
            print(
                f"{name:8} mode={'/'.join(info['modes']):7} {store.name}: sync {info['syncSeconds']:.1f}s "
                f"(embedded {info['embedded']}), {stats['chunks']} chunks of ~{stats['meanLinesPerChunk']} lines "
                f"/ ~{stats['meanTokensPerChunk']} tokens; search {info['msPerQuery']} ms/query"
            )
            if info["modes"] != [name]:
                print(f"  WARNING: {name} answered in mode {info['modes']}: {info['warnings']}")
            report["retrievers"][name] = {
                "settings": dict(settings),
                "index": store.name,
                **info,
                "figures": figures[name],
                "questions": [
                    {"conv": q.sample_id, "category": q.category, "question": q.text, "gold": len(q.gold), **s}
                    for q, s in rows
                ],
            }

    print()
    haystack = "every conversation" if not args.conversations else ", ".join(c["sample_id"] for c in conversations)
    for split, title in [
        ("all", f"All questions (haystack: {haystack})"),
        ("tune", "Tune split: questions of " + ", ".join(SPLITS["tune"])),
        ("confirm", "Confirm split: questions of " + ", ".join(SPLITS["confirm"])),
    ]:
        print(table(title, figures, split))
        print()
        if args.pack:
            for name in figures:
                order = [CATEGORIES[c] for c in SCORED] + ["overall", CATEGORIES[5]]
                print(pack_table(f"{title} -- {name}: pack recall vs whole chunks", figures[name][split], order))
                print()
    seconds = time.perf_counter() - wall
    print(f"wall time {seconds:.1f} s ({os.cpu_count()} cores)")
    if args.json:
        report |= {
            "data": str(args.data),
            "overrides": dict(overrides),
            "questions": len(qs.questions),
            "skippedNoGold": qs.no_gold,
            "missingEvidenceIds": qs.missing_ids,
            "unparsableEvidence": qs.unparsable,
            "turns": len(where),
            "cpus": os.cpu_count(),
            "wallSeconds": round(seconds, 1),
        }
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
