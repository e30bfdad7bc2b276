"""Memory that stays true, measured: a generated long-horizon workspace and three kinds of questions.

The workspace: ``--days`` (default 400) daily logs ``memory/YYYY-MM-DD.md``, each with ``--noise`` (default 8)
conversational turns drawn from the LoCoMo dev set (``Speaker: text``) and the facts of that day. ``--subjects``
(default 240) subjects (people's cities and employers, projects' tools), each stated once and changed 1 to 3
times over the year. How a change is written is mixed, as notes are: ``same`` (the fact restated with its new
value: ``Priya lives in Lisbon``), ``marked`` (as ``remember --supersedes`` writes it: both lines marked) and
``reworded`` (``Priya is back in Lisbon`` after ``Priya lives in Berlin``: no mark, another sentence).

Questions per subject: the current value ("Where does Priya live now?"), the previous value ("... before?"),
when it last changed ("When did Priya move to Lisbon?", answered by a date). Every question is packed
(``Memory.pack``, 1,000 tokens) and read as an agent reads the pack, accuracy@1:

- ``hybrid``: ``query.currentFirst`` off (the search and the pack as before this feature); the first line of
  the pack (items in order) holding one of the subject's values answers ``current`` and ``when`` (its file's
  date); the next different value answers ``previous``;
- ``hybrid+decay``: the same with ``query.hybrid.temporalDecay`` on (half-life 30 days);
- ``truth``: the same pack, reading the labels: the first value line not labelled superseded answers
  ``current`` and ``when``; the line it superseded (``supersededBy`` pointing to it), else the first labelled
  line, answers ``previous``.

Neighbours: ``--linked`` (default 60) notes ``memory/people/<name>.md`` holding an answer (a desk extension)
that only a link reaches: the daily log that mentions a meeting links to the person (``[[Name]]``), the
question names the meeting. Recall@10 of the answer line with ``neighbors: 1`` and without.

    python benchmarks/truth.py [--provider local|none] [--subjects 240] [--days 400] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mdmem.memory import Memory  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MDMEMORY_TEST_SHARED") or REPO.parent / "shared")  # ../shared; a worktree sets it
DATA = SHARED / "bench" / "locomo" / "locomo-dev.json"
MODEL = SHARED / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
START = date(2025, 1, 1)
FIRST = (
    "Amara Bashir Chen Dmitri Elena Farah Gustavo Hana Ivo Jonas Keiko Lars Mateo Nadia Oskar Priya Quentin "
    "Rosa Sanjay Tomas Uma Viktor Wen Yusuf Zofia Aiko Bruno Chiara Dev Esme".split()
)
LAST = "Okafor Lindqvist Moreau Tanaka Novak Haddad Silva Kowalski Ferreira Nakamura Brandt Costa Ibarra".split()
CITIES = "Lisbon Berlin Porto Oslo Lyon Krakow Valencia Tallinn Ghent Turin Bilbao Leipzig Malmo Zagreb".split()
FIRMS = "Acme Initech Globex Umbrella Hooli Vandelay Soylent Stark Wayne Tyrell Cyberdyne Aperture".split()
TOOLS = "Jenkins Buildkite CircleCI Drone GitLab Travis Bamboo TeamCity Concourse Woodpecker".split()
PROJECTS = "Atlas Orion Lighthouse Kestrel Juniper Falcon Meridian Nimbus Quarry Tundra Willow Zephyr".split()
KINDS = {  # slot: (values, statement, the same restated, reworded changes, questions: current, previous, when)
    "city": (CITIES, "{s} lives in {v}", "{s} now lives in {v}",
             ["{s} is back in {v}", "{s} relocated to {v}", "{s} has settled in {v}"],
             ("Where does {s} live now?", "Where did {s} live before?", "When did {s} move to {v}?")),
    "firm": (FIRMS, "{s} works at {v}", "{s} now works at {v}", ["{s} joined {v}", "{s} started a new job at {v}"],
             ("Where does {s} work now?", "Where did {s} work before?", "When did {s} start at {v}?")),
    "tool": (TOOLS, "The {s} project uses {v} for builds", "The {s} project now uses {v} for builds",
             ["The {s} project switched its builds to {v}"],
             ("What does the {s} project use for builds now?", "What did the {s} project use for builds before?",
              "When did the {s} project move its builds to {v}?")),
}  # fmt: skip
# Other wording (--wording other), written apart from the rules: statements, changes and questions none of the
# default set uses, for a check that the rules are not fitted to one generator's sentences.
KINDS_OTHER = {
    "city": (CITIES, "{s} is living in {v}", "{s} is currently living in {v}",
             ["{s} moved to {v}", "{s} has relocated to {v}", "{s} is now based in {v}"],
             ("Which city is {s} in these days?", "Which city was {s} in previously?",
              "When did {s} relocate to {v}?")),
    "firm": (FIRMS, "{s} is employed at {v}", "{s} is currently employed at {v}",
             ["{s} took a job at {v}", "{s} was hired by {v}", "{s} now works for {v}"],
             ("Who is {s}'s employer at the moment?", "Who employed {s} previously?", "When did {s} join {v}?")),
    "tool": (TOOLS, "The {s} team relies on {v} for CI", "The {s} team now relies on {v} for CI",
             ["The {s} team migrated CI to {v}", "The {s} team moved its CI over to {v}"],
             ("Which CI system does the {s} team use today?", "Which CI system did the {s} team use earlier?",
              "When did the {s} team move CI to {v}?")),
}  # fmt: skip
WORDINGS = {"default": KINDS, "other": KINDS_OTHER}
STYLES = (("same", 0.4), ("marked", 0.4), ("reworded", 0.2))


@dataclass
class Fact:
    day: date
    text: str
    value: str
    line: int = 0  # set once the day's lines are laid out


@dataclass
class Subject:
    name: str
    kind: str
    style: str
    facts: list[Fact] = field(default_factory=list)


def noise_turns(data: Path) -> list[str]:
    turns = []
    for sample in json.loads(data.read_text()):
        conv = sample["conversation"]
        for key, value in conv.items():
            if re.fullmatch(r"session_\d+", key):
                turns += [f"{t['speaker']}: {t['text']}".replace("\n", " ") for t in value if t.get("text")]
    return turns


def generate(
    root: Path, rng: random.Random, n_subjects: int, days: int, noise: int, data: Path, kinds: dict[str, Any] = KINDS
) -> list[Subject]:
    subjects: list[Subject] = []
    names = [f"{f} {last}" for f in FIRST for last in LAST]
    rng.shuffle(names)
    projects = [f"{p}-{n}" for p in PROJECTS for n in range(1, 30)]
    rng.shuffle(projects)
    for i in range(n_subjects):
        kind = ("city", "firm", "tool")[i % 3]
        name = projects.pop() if kind == "tool" else names.pop()
        style = rng.choices([s for s, _ in STYLES], [w for _, w in STYLES])[0]
        values, stated, restated, reworded, _ = kinds[kind]
        chosen = rng.sample(values, 1 + rng.randint(1, 3))
        when = sorted(rng.sample(range(0, days - 1), len(chosen)))
        subject = Subject(name, kind, style)
        for n, (v, d) in enumerate(zip(chosen, when, strict=True)):
            text = stated if n == 0 else restated if style == "same" else stated
            text = rng.choice(reworded) if n and style == "reworded" else text
            subject.facts.append(Fact(START + timedelta(days=d), text.format(s=name, v=v), v))
        subjects.append(subject)
    turns = noise_turns(data)
    by_day: dict[date, list[str | Fact]] = {START + timedelta(days=d): rng.sample(turns, noise) for d in range(days)}
    for s in subjects:
        for f in s.facts:
            lines = by_day[f.day]
            lines.insert(rng.randint(0, len(lines)), f)
    for s in subjects:  # the marks, once every line has its number
        for lines in by_day.values():
            for n, item in enumerate(lines):
                if isinstance(item, Fact) and item in s.facts:
                    item.line = n + 3
    for s in subjects:
        if s.style == "marked":
            for old, new in zip(s.facts, s.facts[1:], strict=False):
                old.text += f" (superseded {new.day} → memory/{new.day}.md#L{new.line})"
                new.text += f" (supersedes memory/{old.day}.md#L{old.line})"
    (root / "memory").mkdir(parents=True)
    for d, lines in by_day.items():
        body = [
            f"- [{9 + n % 9:02d}:{(7 * n) % 60:02d}] {x.text if isinstance(x, Fact) else x}"
            for n, x in enumerate(lines)
        ]
        (root / "memory" / f"{d}.md").write_text(f"# {d}\n\n" + "\n".join(body) + "\n", encoding="utf-8")
    return subjects


def value_lines(pack: dict[str, Any], subject: Subject) -> list[tuple[str, str, bool, str]]:
    """(value, date, labelled superseded, ref) of each pack line naming the subject and one of its values."""
    values = {f.value for f in subject.facts}
    out = []
    for item in pack["items"]:
        old = {x["line"]: x.get("by") for x in item.get("supersededBy", [])}
        for n, line in enumerate(item["text"].split("\n"), start=item["startLine"]):
            if subject.name in line:
                for v in values:
                    if re.search(rf"\b{re.escape(v)}\b", line):
                        day = re.search(r"\d{4}-\d{2}-\d{2}", item["path"])
                        out.append((v, day.group() if day else "", n in old, f"{item['path']}#L{n}", old.get(n)))
    return out  # type: ignore[return-value]


def answer(lines: list[Any], labels: bool) -> tuple[str | None, str | None, str | None]:
    """(current, previous, when) as a reader of the pack answers them."""
    if not lines:
        return None, None, None
    current = next((x for x in lines if not (labels and x[2])), None)
    if current is None:
        return None, None, None
    if labels:
        prev = next((x for x in lines if x[2] and x[4] == current[3]), None) or next((x for x in lines if x[2]), None)
    else:
        prev = next((x for x in lines if x[0] != current[0]), None)
    return current[0], prev[0] if prev else None, current[1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="mdm-truth-"))
    try:
        return _run(args, rng, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, rng: random.Random, work: Path) -> dict[str, Any]:
    kinds = WORDINGS[args.wording]
    subjects = generate(work / "ws", rng, args.subjects, args.days, args.noise, args.data, kinds)
    linked = link_set(work / "ws", rng, args.linked, args.days)
    results: dict[str, Any] = {"subjects": len(subjects), "days": args.days, "systems": {}}
    for system in ("hybrid", "hybrid+decay", "truth"):
        mem = open_memory(work, system, args)
        t0 = time.monotonic()
        mem.sync()
        scores: dict[str, list[int]] = {"current": [], "previous": [], "when": []}
        by_style: dict[str, list[int]] = {}
        for s in subjects:
            q_cur, q_prev, q_when = (q.format(s=s.name, v=s.facts[-1].value) for q in kinds[s.kind][4])
            cur_fact, prev_fact = s.facts[-1], s.facts[-2]
            got = [
                answer(value_lines(mem.pack(q, budget_tokens=1000), s), system == "truth")
                for q in (q_cur, q_prev, q_when)
            ]
            scores["current"].append(int(got[0][0] == cur_fact.value))
            scores["previous"].append(int(got[1][1] == prev_fact.value))
            scores["when"].append(int(got[2][2] == cur_fact.day.isoformat()))
            by_style.setdefault(s.style, []).append(int(got[0][0] == cur_fact.value))
        took = time.monotonic() - t0
        acc = {k: round(sum(v) / len(v), 3) for k, v in scores.items()}
        acc["currentByStyle"] = {k: round(sum(v) / len(v), 3) for k, v in sorted(by_style.items())}
        acc["seconds"] = round(took, 1)
        results["systems"][system] = acc
        if system == "truth" and linked:  # (--linked 0: no linked notes to find)
            results["neighbours"] = neighbour_recall(mem, linked)
        mem.close()
        print(system, json.dumps(acc), flush=True)
    return results


def link_set(root: Path, rng: random.Random, n: int, days: int) -> list[tuple[str, str, str]]:
    """``n`` meetings (a daily log line linking a person) and people's notes holding the answer."""
    people = root / "memory" / "people"
    people.mkdir(parents=True, exist_ok=True)
    out = []
    places = ("harbour", "glacier", "orchard", "quarry", "meadow", "canyon")
    works = ("survey", "audit", "retrofit", "census", "mapping", "restoration", "inventory", "appraisal", "study")
    topics = [f"{a} {b}" for a in places for b in works]
    for i in range(n):
        first, last = rng.choice(FIRST), rng.choice(LAST) + f"{i}"
        name, topic, ext = f"{first} {last}", topics[i % len(topics)], str(4000 + i)
        day = START + timedelta(days=rng.randrange(days))
        log = root / "memory" / f"{day}.md"
        log.write_text(log.read_text() + f"- [17:{i % 60:02d}] Kick-off for the {topic} with [[{name}]]\n")
        (people / f"{name}.md").write_text(f"# {name}\n\n- Desk phone: extension {ext}\n- Prefers mornings\n")
        out.append((f"who ran the {topic} kick-off", f"memory/people/{name}.md", ext))
    return out


def neighbour_recall(mem: Memory, linked: list[tuple[str, str, str]]) -> dict[str, float]:
    found = {0: 0, 1: 0}
    for query, path, ext in linked:
        for hops in (0, 1):
            res = mem.search(query, max_results=10, min_score=0, neighbors=hops)["results"]
            found[hops] += any(r["path"] == path and ext in r["snippet"] for r in res)
    return {"without": round(found[0] / len(linked), 3), "neighbors1": round(found[1] / len(linked), 3)}


def open_memory(work: Path, system: str, args: argparse.Namespace) -> Memory:
    ms: dict[str, Any] = {"provider": args.provider, "store": {"path": str(work / "index.sqlite")}}  # one index
    if args.provider == "local":
        ms["local"] = {"modelPath": str(args.model)}
    if system != "truth":  # the search and the pack as they were: no grouping, no current line brought in
        ms["query"] = {"currentFirst": False}
    if system == "hybrid+decay":
        ms["query"]["hybrid"] = {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}
    cfg = work / f"{system}.json5"
    body = {"agents": {"defaults": {"workspace": str(work / "ws"), "userTimezone": "UTC", "memorySearch": ms}}}
    cfg.write_text(json.dumps(body))
    return Memory.open(config_path=cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--provider", choices=["local", "none"], default="local")
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--data", type=Path, default=DATA, help="locomo-dev.json (the noise)")
    ap.add_argument("--subjects", type=int, default=240)
    ap.add_argument("--days", type=int, default=400)
    ap.add_argument("--noise", type=int, default=8, help="conversation turns per daily log")
    ap.add_argument("--linked", type=int, default=60)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--wording", choices=sorted(WORDINGS), default="default", help="other: a second set of sentences")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
