"""Indexing cost of ``chunking.windowVectors``: ``late`` against ``separate``, alternating runs, one machine.

Indexes the same workspace from scratch with each setting in turn (late, separate, late, separate, ...; the
embedding cache off, the model loaded and warmed before the clock starts) and counts what went through
the model: sequences decoded (late: one per chunk that fits the context; separate: one per window),
llama.cpp decode calls (separate windows share decodes, as the provider packs them), tokens, and the
wall time of ``sync``. Workspaces: ``locomo`` (the LoCoMo dev haystack, benchmarks/locomo.py's layout) and
``daily`` (benchmarks/index_throughput.py's daily logs).

Quality is benchmarks/locomo.py's: ``--set memorySearch.chunking.windowVectors="late"``.

    python benchmarks/late_chunking.py [--workspace locomo daily] [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import index_throughput, locomo  # noqa: E402
from mdmem.config.load import load_config  # noqa: E402
from mdmem.memory import Memory  # noqa: E402
from mdmem.providers.base import EmbeddingProvider  # noqa: E402
from mdmem.providers.local import LocalEmbeddingProvider, decode_groups  # noqa: E402

MODES = ("late", "separate")


class Counter:
    """Counts what a provider sends through the model, by wrapping its two embedding entry points."""

    def __init__(self, provider: EmbeddingProvider) -> None:
        self.sequences = self.decodes = self.tokens = 0
        plain, tokens = provider.embed_batch, provider.embed_token_batch

        def embed_batch(texts: Sequence[str]) -> Any:
            sized = [(t, provider.count_tokens(t)) for t in texts]
            self.sequences += len(texts)
            self.tokens += sum(n for _, n in sized)
            self.decodes += len(
                decode_groups(sized, provider.max_input_tokens, LocalEmbeddingProvider.SHARED_DECODE_TOKENS)
            )
            return plain(texts)

        def embed_token_batch(docs: Sequence[Sequence[str]]) -> Any:
            out = tokens(docs)
            done = [got for got in out if got is not None]
            self.sequences += len(done)
            self.decodes += len(done)
            self.tokens += sum(len(got.vectors) for got in done)
            return out

        provider.embed_batch = embed_batch  # type: ignore[method-assign]
        provider.embed_token_batch = embed_token_batch  # type: ignore[method-assign]


def write(kind: str, root: Path, data: Path) -> Path:
    ws = root / f"ws-{kind}"
    if kind == "locomo":
        locomo.write_workspace(json.loads(data.read_text(encoding="utf-8")), ws)
    else:
        index_throughput.write_workspace(ws, 300)
    return ws


def index_once(ws: Path, mode: str, model: Path, root: Path, run: int) -> dict[str, Any]:
    folder = root / f"run-{run}"
    folder.mkdir()
    cfg = folder / "config.json5"
    ms = {
        "provider": "local",
        "local": {"modelPath": str(model), "threads": os.cpu_count() or 1},
        "chunking": {"windowVectors": mode},
        "cache": {"enabled": False},
        "store": {"path": str(folder / "index.sqlite")},
        "sync": {"onSessionStart": False, "onSearch": False, "watch": False},
    }
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": ms}}}))
    os.environ["MDMEMORY_HOME"] = str(folder / "home")
    with Memory(load_config(cfg).agent()) as mem:
        provider = mem.choice.provider
        assert isinstance(provider, LocalEmbeddingProvider)
        provider.load()  # loading (and the token context's first use) are not part of the measurement
        provider.embed_query("warm-up")
        if mode == "late":
            provider.embed_token_documents([["warm-up"]])
        counter = Counter(provider)
        started = time.perf_counter()
        report = mem.sync()
        seconds = time.perf_counter() - started
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "chunks": report["chunks"],
        "inputs": report["embedded"],  # vectors made (windows, or whole chunks)
        "sequences": counter.sequences,
        "decodes": counter.decodes,
        "tokens": counter.tokens,
    }


def interleaved(ws: Path, model: Path) -> dict[str, Any]:
    """Chunk by chunk, late then separate, then the other way round for the next chunk: the embedding time
    of each setting summed over every chunk of the workspace. Load changes on a shared machine hit both alike.
    Separate windows already embedded for an earlier chunk (overlaps) are skipped, as a sync reuses them."""
    from mdmem.index.chunker import chunk_markdown
    from mdmem.index.embedding import window_inputs
    from mdmem.index.late import pool_windows

    provider = LocalEmbeddingProvider(str(model), ws / ".models", threads=os.cpu_count() or 1)
    provider.load()
    provider.embed_documents(["warm-up"])
    provider.embed_token_documents([["warm-up"]])
    setup = (provider.token_context(), 0)
    seconds = {"late": 0.0, "separate": 0.0}
    seen: set[str] = set()
    chunks = 0
    for path in sorted((ws / "memory").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for chunk in chunk_markdown(text, path.name, count_tokens=provider.count_tokens):
            windows, plan = window_inputs(chunk, 64, provider.count_tokens, setup)
            if plan is None:
                continue
            texts = [
                t for _, t, _, _ in dict.fromkeys(window_inputs(chunk, 64, provider.count_tokens)[0]) if t not in seen
            ]
            seen.update(texts)
            order = ("late", "separate") if chunks % 2 == 0 else ("separate", "late")
            for mode in order:
                started = time.perf_counter()
                if mode == "late":
                    got = provider.embed_token_documents([plan.pieces])[0]
                    assert got is not None
                    pool_windows(plan, got)
                elif texts:
                    provider.embed_documents(texts)
                seconds[mode] += time.perf_counter() - started
            chunks += 1
    provider.close()
    return {
        "chunks": chunks,
        "late_seconds": round(seconds["late"], 2),
        "separate_seconds": round(seconds["separate"], 2),
        "late_over_separate": round(seconds["late"] / seconds["separate"], 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workspace", nargs="+", choices=["locomo", "daily"], default=["locomo", "daily"])
    ap.add_argument("--rounds", type=int, default=2, help="alternating pairs (late, separate) per workspace")
    ap.add_argument("--model", type=Path, default=locomo.DEFAULT_MODEL)
    ap.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--interleaved", action="store_true", help="embedding time only, chunk by chunk, alternating")
    args = ap.parse_args(argv)
    if args.interleaved:
        out = {}
        with tempfile.TemporaryDirectory(prefix="late-") as tmp:
            for kind in args.workspace:
                out[kind] = interleaved(write(kind, Path(tmp), args.data), args.model)
                print(f"{kind:7} {json.dumps(out[kind])}", flush=True)
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
        return 0
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="late-") as tmp:
        root = Path(tmp)
        run = 0
        for kind in args.workspace:
            ws = write(kind, root, args.data)
            runs = []
            for _ in range(args.rounds):
                for mode in MODES:
                    run += 1
                    row = index_once(ws, mode, args.model, root, run)
                    print(f"{kind:7} {json.dumps(row)}", flush=True)
                    runs.append(row)
            summary = {}
            for mode in MODES:
                mine = [r for r in runs if r["mode"] == mode]
                summary[mode] = {k: mine[0][k] for k in ("chunks", "inputs", "sequences", "decodes", "tokens")}
                summary[mode]["seconds"] = [r["seconds"] for r in mine]
                summary[mode]["median_seconds"] = statistics.median(r["seconds"] for r in mine)
            ratio = summary["late"]["median_seconds"] / summary["separate"]["median_seconds"]
            summary["late_over_separate"] = {
                "wall": round(ratio, 3),
                "tokens": round(summary["late"]["tokens"] / summary["separate"]["tokens"], 3),
                "sequences": round(summary["late"]["sequences"] / summary["separate"]["sequences"], 3),
            }
            results[kind] = {"runs": runs, **summary}
            print(f"{kind}: late/separate wall {ratio:.3f}, {json.dumps(summary['late_over_separate'])}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
