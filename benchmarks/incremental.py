"""Incremental sync cost: a 1,000-file workspace, one file edited, with the shared MiniLM GGUF.

Builds the index once, then edits one chunk of one multi-chunk daily log and times ``Memory.sync()``
(discover and stat 1,000 files, re-chunk the edited file with the model's tokenizer, reuse cached
vectors, embed what changed, write one transaction) against embedding only the changed chunks with the
same provider. Target: sync time / embedding time <= 1.5.

    python benchmarks/incremental.py [--files 1000] [--trials 5] [--model PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.config.load import load_config  # noqa: E402
from mdmem.index.chunker import chunk_markdown  # noqa: E402
from mdmem.index.indexer import embedding_inputs  # noqa: E402
from mdmem.memory import Memory  # noqa: E402

DEFAULT_MODEL = Path(__file__).resolve().parent.parent.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
TOPICS = ["backups", "travel", "garden", "dentist", "release", "budget", "concert", "plumbing", "tax", "recipes"]


def day_note(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return (
        f"# 2026 day {i}\n\n## {topic}\n\n- Talked about {topic} with the team; follow up on item {i}.\n"
        f"- Decision {i}: keep the {topic} checklist in the shared folder.\n"
    )


def big_note(version: int) -> str:
    sections = []
    for s in range(6):
        lines = [
            f"- Point {s}.{k}: the {TOPICS[(s + k) % 10]} plan needs review before the next milestone."
            for k in range(14)
        ]
        if s == 3:
            lines[0] = f"- Point 3.0: revision {version} of the migration checklist was approved today."
        sections.append(f"## Section {s}\n\n" + "\n".join(lines))
    return "# Project log\n\n" + "\n\n".join(sections) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        (ws / "memory").mkdir(parents=True)
        for i in range(args.files - 1):
            (ws / "memory" / f"{i:04d}.md").write_text(day_note(i))
        big = ws / "memory" / "project.md"
        big.write_text(big_note(0))
        cfg = root / "cfg.json5"
        ms = {
            "provider": "local",
            "local": {"modelPath": str(args.model), "threads": threads},
            "store": {"path": str(root / "index.sqlite")},
            "sync": {"onSearch": False},
        }
        cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": ms}}}))
        os.environ["MDMEMORY_HOME"] = str(root / "home")
        mem = Memory(load_config(cfg).agent())
        provider = mem.choice.provider
        provider.load()
        t0 = time.perf_counter()
        first = mem.sync()
        initial = time.perf_counter() - t0
        print(f"initial index: {first['files']} files, {first['chunks']} chunks in {initial:.1f} s")
        sync_times, embed_times, embedded = [], [], []
        window = mem.settings.chunking.window_tokens

        def inputs(note: str) -> set[str]:
            rows = chunk_markdown(note, "memory/project.md", count_tokens=provider.count_tokens)
            return {t for c in rows for t in embedding_inputs(c, window, provider.count_tokens)}

        for trial in range(1, args.trials + 1):
            text = big_note(trial)
            big.write_text(text)
            os.utime(big, (time.time(), time.time() + trial))
            t0 = time.perf_counter()
            report = mem.sync()
            sync_times.append(time.perf_counter() - t0)
            embedded.append(report["embedded"])
            # the same work done bare: embed only the inputs (chunks and their windows) whose text changed
            changed = sorted(inputs(text) - inputs(big_note(trial - 1)))
            t0 = time.perf_counter()
            provider.embed_documents(changed)
            embed_times.append(time.perf_counter() - t0)
        mem.close()
    sync_s, embed_s = statistics.median(sync_times), statistics.median(embed_times)
    result = {
        "files": args.files,
        "trials": args.trials,
        "embedded_per_sync": embedded,
        "sync_ms": round(sync_s * 1000, 1),
        "embed_only_ms": round(embed_s * 1000, 1),
        "ratio": round(sync_s / embed_s, 3),
        "initial_index_s": round(initial, 1),
    }
    print(
        f"edit one file of {args.files}: sync {result['sync_ms']} ms (embedded {embedded} inputs), "
        f"embedding only the changed inputs {result['embed_only_ms']} ms"
    )
    print(f"ratio = {result['ratio']:.2f} (target <= 1.5)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
