"""Data for the scale benchmarks (``pg_scale.py``, ``pg_fleet.py``): generated agent notes with real MiniLM
embeddings, computed once and kept in a work folder, plus vectors derived from them for the 1M case.

- ``note(i)``: the text of chunk ``i``, two or three lines of an agent's daily log (who, what, where, when,
  ~50 tokens), the same for the same ``i`` on every run. Lines are drawn from ~40 templates over people,
  projects, places, tools, foods and numbers, so the texts have topics (and the embeddings neighbourhoods)
  and the keyword index has common and rare terms.
- ``question(i)``: an agent-style question about such notes.
- ``embed(workdir, n)``: MiniLM vectors (the project's local provider and the shared GGUF) of the first
  ``n`` notes, computed in pieces of ``PIECE`` texts saved as ``emb-XXXXX.npy``; a run computes at most
  ``budget`` seconds' worth and stops (call again to go on), so no job holds the machine for long.
- ``derived(real, n)``: more vectors with the neighbourhood structure of the real ones: each is a point on
  the segment between a real vector and one of its 10 nearest real neighbours (uniform in the first half),
  plus noise a tenth of the typical distance to that neighbour, normalised. Its text is the first lines of
  the one note and the last of the other (``derived_note``), so text and vector still roughly agree.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PIECE = 5000
DIMS = 384

FIRST = (
    "Dana Mika Ravi Lena Omar Sofia Jonas Aiko Priya Mateo Elif Tomas Nadia Felix Yara Bruno Ines Kenji "
    "Zoe Hugo Amara Lars Chiara Diego Freya Malik Noor Oskar Paula Quinn Rosa Sami Tara Ugo Vera Wen Xavi"
).split()
LAST = "Okafor Lindqvist Tanaka Moreau Novak Haddad Costa Berg Ibarra Kowalski Sato Rahman Ferreira Weber".split()
PROJECTS = (
    "Atlas Vault Heron Kestrel Juniper Quartz Falcon Lumen Orchid Basalt Cobalt Nimbus Sable Tundra Willow "
    "Zephyr Marlin Onyx Pico Ridge Saffron Tidal Umber Vesper"
).split()
PLACES = (
    "Lisbon Porto Oslo Berlin Kyoto Osaka Nairobi Lagos Lima Quito Hanoi Seoul Tallinn Riga Krakow Bologna "
    "Valencia Marseille Antwerp Bergen Reykjavik Montreal Denver Austin"
).split()
TOOLS = (
    "Postgres restic Grafana Terraform Kubernetes nginx Redis Kafka Airflow Jenkins Sentry Prometheus "
    "ClickHouse Vault Ansible systemd"
).split()
FOODS = "ramen sushi tacos pho dumplings paella curry falafel bibimbap risotto ceviche pierogi".split()
HOBBIES = "climbing guitar chess pottery running swimming birding sourdough gardening cycling sketching".split()
FEELINGS = "tired excited worried relieved annoyed calm curious proud stressed hopeful".split()
WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
CJK = ["寿司を食べた", "会议改到周四", "项目备份完成", "京都旅行计划", "生日快乐", "拉面店排队"]

TEMPLATES = (
    "{p} moved the {proj} standup to {day} at {h}:{mm}.",
    "Deployed {proj} {v} to staging; {tool} alerts were quiet afterwards.",
    "The nightly {tool} backup of {proj} failed with a timeout at {h}:{mm}; retried by hand.",
    "{p} wants the {proj} budget cut by {n} percent before the review on {date}.",
    "Decided with {p} to replace {tool} with {tool2} in {proj} next quarter.",
    "Bug in {proj}: requests over {n} KB are dropped by {tool}; {p} is looking into it.",
    "Latency of the {proj} search went from {n} ms to {n2} ms after the index change.",
    "Reviewed {p2}'s pull request for {proj}; asked for tests around the {tool} retry logic.",
    "{p} is on call this week; escalate {proj} incidents to {p2} after {h} pm.",
    "The {proj} migration to {tool} is blocked on a schema change only {p} can approve.",
    "Flight to {place} on {date}, seat {n}{seat}; hotel near the old town, check-in after {h} pm.",
    "Dinner with {p} at a {food} place in {place}; {p} recommended the {food2} instead.",
    "{p}'s birthday is on {date}; they like {hobby} and {food}.",
    "Doctor appointment on {day} at {h}:{mm} about the knee; bring the scan results.",
    "Went {hobby} with {p} on {day}; felt {feel} but it was worth it.",
    "Bought a new {hobby} book; {p} lent me theirs about {place}.",
    "Vet visit for the cat on {date}; next vaccine due in {n} weeks.",
    "Called {p} about the {place} trip; they prefer {day} departures.",
    "Planted tomatoes and basil; the {hobby} club meets at {p}'s house on {day}.",
    "Felt {feel} after the {proj} retro; {p} said the deadline on {date} is firm.",
    "Weekly plan: finish the {proj} report, {hobby} twice, call {p} about {place}.",
    "{p} prefers green tea to coffee and hates meetings before {h} am.",
    "Password manager entry for {tool} rotated on {date}; old key revoked by {p}.",
    "Read about {tool} performance tuning; try raising the cache to {n} MB for {proj}.",
    "The {proj} demo for {p2} went well; follow up with pricing by {day}.",
    "Rent goes up by {n} euros from {date}; ask {p} about the lease in {place}.",
    "Running total this month: {n} km; the half marathon in {place} is on {date}.",
    "Kid's school play on {day} at {h} pm; {p} will record it.",
    "Note to self: {p} is allergic to {food}, order {food2} for the team lunch.",
    "{tool} upgrade to {v} needs a restart of every {proj} worker; scheduled for {day}.",
    "Interviewed {p} {last} for the {proj} team; strong on {tool}, weaker on testing.",
    "Moved savings to the {place} account; {p} handles the paperwork on {date}.",
    "Car service on {date}: brakes and tyres, about {n}0 euros.",
    "Podcast idea with {p}: {hobby} for busy engineers, first episode in {place}.",
    "The {proj} cluster ran out of disk at {h}:{mm}; {tool} logs filled {n} GB.",
    "{p} asked to keep the {proj} customer list private; do not share it with {p2}.",
    "Learned that {p} speaks Japanese; they lived in {place} for {n} years.",
    "Recipe from {p}: {food} with extra garlic, {n} minutes in the oven.",
    "Sprint goal for {proj}: cut cold start below {n} ms and fix the {tool} leak.",
    "Meditation streak: {n} days; felt {feel} on {day}.",
)


def _fill(rng: np.random.Generator, template: str) -> str:
    pick = lambda seq: str(seq[int(rng.integers(len(seq)))])  # noqa: E731
    first, second = pick(FIRST), pick(FIRST)
    values = {
        "p": first,
        "p2": second if second != first else pick(FIRST),
        "last": pick(LAST),
        "proj": pick(PROJECTS),
        "tool": pick(TOOLS),
        "tool2": pick(TOOLS),
        "place": pick(PLACES),
        "food": pick(FOODS),
        "food2": pick(FOODS),
        "hobby": pick(HOBBIES),
        "feel": pick(FEELINGS),
        "day": pick(WEEKDAYS),
        "date": f"2026-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}",
        "h": str(int(rng.integers(1, 12))),
        "mm": f"{int(rng.integers(0, 4)) * 15:02d}",
        "n": str(int(rng.integers(2, 99))),
        "n2": str(int(rng.integers(100, 999))),
        "v": f"{int(rng.integers(1, 5))}.{int(rng.integers(0, 20))}",
        "seat": pick("ABCDEF"),
    }
    return template.format(**values)


def note(i: int) -> str:
    """Chunk ``i``: a daily-log section of 2 or 3 lines (about 50 tokens: one of mdmem's 64-token
    windows, what each vector of an index embeds), the same on every run."""
    rng = np.random.default_rng([17, i])
    lines = [_fill(rng, str(TEMPLATES[int(rng.integers(len(TEMPLATES)))])) for _ in range(int(rng.integers(2, 4)))]
    if rng.random() < 0.03:
        lines.append(str(CJK[int(rng.integers(len(CJK)))]))
    return "\n".join(f"- {line}" for line in lines)


def derived_note(a: int, b: int) -> str:
    """The text of a derived vector between notes ``a`` and ``b``: the first lines of one, the last of the other."""
    la, lb = note(a).split("\n"), note(b).split("\n")
    return "\n".join(la[: (len(la) + 1) // 2] + lb[len(lb) // 2 :])


QUESTIONS = (
    "what did {p} say about the {proj} budget",
    "when is the {proj} standup now",
    "why did the {tool} backup fail",
    "who is on call for {proj} this week",
    "when do I fly to {place}",
    "what food does {p} like",
    "when is {p}'s birthday",
    "what is blocking the {proj} migration",
    "which restaurant in {place} did {p} recommend",
    "what did we decide about {tool} in {proj}",
    "how did the {proj} demo go",
    "what is {p} allergic to",
    "how fast is the {proj} search now",
    "when is the half marathon in {place}",
    "what did the vet say about the cat",
)


def question(i: int) -> str:
    rng = np.random.default_rng([29, i])
    return _fill(rng, str(QUESTIONS[int(rng.integers(len(QUESTIONS)))]))


PER_FILE = 50  # notes a file when the benchmarks write them into a store


def write_notes(
    store: Any, size: int, text: Any, vecs: np.ndarray | None = None, budget: float = float("inf")
) -> tuple[int, bool]:
    """Write notes 0..size-1 into ``store`` through ``replace_file``, ``PER_FILE`` chunks a file (chunk
    ``i``'s text ``text(i)``, its vector ``vecs[i]`` when given), skipping files already there: (chunks
    written now, whether all are present). Stops when ``budget`` seconds ran out (run again to go on)."""
    from mdmem.store.rows import ChunkRow, FileRow

    done, started, wrote = set(store.files()), time.monotonic(), 0
    for first in range(0, size, PER_FILE):
        rel = f"memory/{first // PER_FILE:05d}.md"
        if rel in done:
            continue
        if time.monotonic() - started > budget:
            return wrote, False
        ids = range(first, min(first + PER_FILE, size))
        rows = [
            ChunkRow(rel, "memory", 3 * j + 1, 3 * j + 3, f"c{i}", f"v{i}", "Notes", text(i)) for j, i in enumerate(ids)
        ]
        vectors = None if vecs is None else [([f"v{i}"], vecs[i : i + 1]) for i in ids]
        store.replace_file(FileRow(rel, "memory", f"h{first}", 0.0, 0), rows, vectors)
        wrote += len(rows)
    return wrote, True


def provider(model: Path, threads: int | None = None) -> Any:
    """The project's local provider on the shared MiniLM GGUF, loaded."""
    import os
    import tempfile

    from mdmem.config.load import load_config
    from mdmem.memory import Memory

    local = {"modelPath": str(model), "threads": threads or os.cpu_count() or 1}
    tree = {
        "agents": {"defaults": {"workspace": tempfile.mkdtemp(), "memorySearch": {"provider": "local", "local": local}}}
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(tree, f)
    cfg = load_config(f.name)
    chosen = Memory(cfg.agent(), cfg).choice.provider
    assert chosen is not None
    chosen.load()
    return chosen


def embed(workdir: Path, n: int, model: Path, budget: float = 600.0) -> np.ndarray | None:
    """The MiniLM vectors of notes 0..n-1, or None when ``budget`` seconds ran out first (run again)."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    embedder = None
    parts = []
    for first in range(0, n, PIECE):
        path = workdir / f"emb-{first:07d}.npy"
        if not path.exists():
            if time.monotonic() - started > budget:
                return None
            if embedder is None:
                embedder = provider(model)
            t = time.perf_counter()
            texts = [note(i) for i in range(first, min(first + PIECE, n))]
            vecs = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
            np.save(path.with_suffix(".tmp.npy"), vecs)
            path.with_suffix(".tmp.npy").rename(path)
            rate = len(texts) / (time.perf_counter() - t)
            print(f"embedded notes {first}..{first + len(texts) - 1}: {rate:.0f} texts/s", flush=True)
        parts.append(np.load(path)[: max(0, min(PIECE, n - first))])
    return np.concatenate(parts)


def neighbours(real: np.ndarray, k: int = 10, block: int = 2048) -> np.ndarray:
    """Each real vector's ``k`` nearest other real vectors (exact, by blocks)."""
    out = np.empty((len(real), k), dtype=np.int64)
    for s in range(0, len(real), block):
        sims = real[s : s + block] @ real.T
        for r in range(sims.shape[0]):
            sims[r, s + r] = -2.0
        top = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1)
        out[s : s + block] = np.take_along_axis(top, order, axis=1)
    return out


def derived(real: np.ndarray, n: int, workdir: Path, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """``n`` derived vectors (see the module docstring) and their (a, b) note pairs, cached in ``workdir``."""
    path = workdir / f"derived-{len(real)}-{n}.npz"
    if path.exists():
        got = np.load(path)
        return got["vectors"], got["pairs"]
    near = workdir / f"neighbours-{len(real)}.npy"
    if not near.exists():
        np.save(near, neighbours(real))
    nn = np.load(near)
    rng = np.random.default_rng(seed)
    a = rng.integers(0, len(real), size=n)
    b = nn[a, rng.integers(0, nn.shape[1], size=n)]
    t = rng.uniform(0.0, 0.5, size=(n, 1)).astype(np.float32)
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        va, vb = real[a[s:e]], real[b[s:e]]
        gap = np.linalg.norm(va - vb, axis=1, keepdims=True)
        noise = rng.normal(size=va.shape).astype(np.float32) / np.sqrt(real.shape[1])
        v = (1 - t[s:e]) * va + t[s:e] * vb + 0.1 * gap * noise
        out[s:e] = v / np.linalg.norm(v, axis=1, keepdims=True)
    pairs = np.stack([a, b], axis=1)
    np.savez(path, vectors=out, pairs=pairs)
    return out, pairs
