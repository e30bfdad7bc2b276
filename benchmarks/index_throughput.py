"""Indexing throughput with the shared MiniLM GGUF: mdmem end to end vs raw llama-cpp-python.

Writes a workspace of daily logs (a few hundred ~400-token chunks), indexes it with mdmem's real
pipeline (discovery, chunking with the model's tokenizer, embedding through the local provider, SQLite
writes), then embeds exactly the same texts with a bare ``llama_cpp.Llama`` in the same process, short inputs sharing
decodes as the provider does (the batched baseline).
Target: mdmem time / raw time <= 1.10.

    python benchmarks/index_throughput.py [--chunks 300] [--model PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.config.load import load_config  # noqa: E402
from mdmem.index.indexer import embedding_inputs  # noqa: E402
from mdmem.memory import Memory  # noqa: E402
from mdmem.providers.local import LocalEmbeddingProvider, decode_groups  # noqa: E402

DEFAULT_MODEL = Path(__file__).resolve().parent.parent.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
SUBJECTS = "Dana Mika the team our landlord the vet my sister Priya the client Tomás".split(" ")
VERBS = ["decided to", "asked us to", "promised to", "forgot to", "wants to", "will try to", "agreed to"]
OBJECTS = [
    "move the backups to the new NAS before Friday",
    "book the flights to Kyoto for the second week of May",
    "switch the database index to sqlite-vec and measure recall again",
    "water the tomatoes and basil every other evening while we are away",
    "renew the passport and scan the receipt into the tax folder",
    "review the pull request about the watcher debounce and the polling fallback",
    "call the plumber about the leaking kitchen tap on Thursday morning",
    "prepare the slides for the quarterly planning meeting with finance",
]


def write_workspace(root: Path, chunks: int, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    (root / "memory").mkdir(parents=True)
    sections_per_file = 4
    files = max(1, chunks // sections_per_file)
    for f in range(files):
        lines = [f"# 2026-{1 + f // 28:02d}-{1 + f % 28:02d}", ""]
        for s in range(sections_per_file):
            lines += [f"## {9 + s * 3:02d}:{rng.integers(0, 60):02d} — notes", ""]
            for _ in range(14):  # ~14 sentences of ~25 tokens: one ~400-token chunk per section
                lines.append(
                    f"- {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}; "
                    f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."
                )
            lines.append("")
        (root / "memory" / f"2026-{1 + f // 28:02d}-{1 + f % 28:02d}.md").write_text("\n".join(lines))


def shared_decodes(llm: Any, texts: list[str], limit: int = 512) -> list[list[str]]:
    """The batched baseline: consecutive short inputs (<= SHARED_DECODE_TOKENS) in one decode while they
    fit ``limit`` tokens, as llama.cpp allows and as the local provider does; a long input alone."""
    sized = [(text, len(llm.tokenize(text.encode("utf-8")))) for text in texts]
    return decode_groups(sized, limit, LocalEmbeddingProvider.SHARED_DECODE_TOKENS)


def raw_embed(model: Path, texts: list[str], threads: int) -> float:
    from mdmem.providers.native import load_llama_cpp

    llama_cpp, _ = load_llama_cpp()  # the CPU backend a portable build ships

    llm = llama_cpp.Llama(
        str(model),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        flash_attn=True,
        n_threads=threads,
        verbose=False,
    )
    llm.embed(texts[0], normalize=True)  # warm-up, like the provider's load
    started = time.perf_counter()
    for group in shared_decodes(llm, texts):
        llm.embed(group, normalize=True)
    elapsed = time.perf_counter() - started
    llm.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_workspace(root / "ws", args.chunks)
        cfg = root / "config.json5"
        cfg.write_text(
            json.dumps(
                {
                    "agents": {
                        "defaults": {
                            "workspace": str(root / "ws"),
                            "memorySearch": {
                                "provider": "local",
                                "local": {"modelPath": str(args.model), "threads": threads},
                                "store": {"path": str(root / "index.sqlite")},
                            },
                        }
                    }
                }
            )
        )
        os.environ["MDMEMORY_HOME"] = str(root / "home")
        mem = Memory(load_config(cfg).agent())
        provider = mem.choice.provider
        provider.load()  # model load is not part of either measurement
        provider.embed_query("warm-up")
        started = time.perf_counter()
        report = mem.sync()
        md_seconds = time.perf_counter() - started
        window = mem.settings.chunking.window_tokens
        inputs = [
            text
            for path in sorted(mem.store.files())
            for c in mem.store.chunks_of(path)
            for text in embedding_inputs(c, window, provider.count_tokens)
        ]
        texts = [provider.prepare_document(t) for t in dict.fromkeys(inputs)]  # each distinct input once
        mem.close()
        raw_seconds = raw_embed(args.model, texts, threads)
    n = report["embedded"]
    result = {
        "chunks": report["chunks"],
        "embedded": n,
        "raw_inputs": len(texts),
        "threads": threads,
        "mdmemory_seconds": round(md_seconds, 2),
        "raw_seconds": round(raw_seconds, 2),
        "mdmemory_chunks_per_s": round(report["chunks"] / md_seconds, 2),
        "raw_chunks_per_s": round(report["chunks"] / raw_seconds, 2),
        "mdmemory_inputs_per_s": round(n / md_seconds, 2),
        "raw_inputs_per_s": round(len(texts) / raw_seconds, 2),
        "ratio": round(md_seconds / raw_seconds, 3),
    }
    print(f"chunks {result['chunks']}: {n} embedding inputs (windows, or chunks without), {threads} threads")
    print(
        f"mdmem index: {md_seconds:7.2f} s  {result['mdmemory_chunks_per_s']:6.2f} chunks/s "
        f"({result['mdmemory_inputs_per_s']:.2f} inputs/s)"
    )
    print(
        f"raw llama-cpp : {raw_seconds:7.2f} s  {result['raw_chunks_per_s']:6.2f} chunks/s "
        f"({result['raw_inputs_per_s']:.2f} inputs/s, the same {len(texts)} texts)"
    )
    print(f"ratio mdmem/raw = {result['ratio']:.3f} (target <= 1.10)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
