"""The simulated ten years of benchmarks/ten_year.py (pure, seeded): a person's memory files, day by day, the
questions they ask over the years (the usage stream) and the held-out questions of the measurement.

Files: one daily log ``memory/YYYY-MM-DD.md`` per day (``# date``, then ``- HH:MM`` lines of one-off chatter,
now and then a line naming a topic, and the topic facts stated that day); ``MEMORY.md`` (who the person is,
facts a person keeps there); notes of their own (``memory/house.md``, ``memory/projects/heron.md``,
``memory/people/friend.md``, ``memory/recipes.md``); a few daily logs pinned (``pinned: true`` front matter
or a ``<!-- pin -->`` line), among them the day of a dormant topic's facts (the wedding).

Every file is a list of dated lines; the file as of day D holds the lines of days up to D, so the workspace
can grow as the simulation goes, and a line's number never changes once written.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from ten_year_chatter import chatter, locomo_turns
from ten_year_topics import NAMES, TOPICS

TODAY = date(2026, 3, 31)  # the simulated today: fixed, so every run writes the same world
Line = tuple[str, int]
NOTE_TITLES = {
    "memory/house.md": "# The house",
    "memory/projects/heron.md": "# Project Heron",
    "memory/people/friend.md": "# {friend}",
    "memory/recipes.md": "# Recipes worth keeping",
}
MEMORY_HEAD = (
    "# Memory\n\n- I am Sam; partner Alex; son Noah (born 2017).\n- Prefer short answers; metric units; "
    "24-hour times.\n- Work: backend engineer at Tessel, later at Lumen.\n"
)


@dataclass(frozen=True)
class Question:
    text: str
    gold: frozenset[Line]
    group: str  # "recurring", "dormant" (daily logs), "notes" (notes, MEMORY.md), "pinned"
    topic: str
    fact: str  # the statement on the gold line


@dataclass(frozen=True)
class Event:
    """One use in the stream: at a simulated time, a query asked as a ``pack`` (a recall), a ``search``, or a
    ``get`` (a search, then the top result's file read)."""

    at: float
    query: str
    kind: str
    topic: str  # "" for a one-off question


@dataclass
class Draft:
    head: str
    lines: list[tuple[date, str]] = field(default_factory=list)

    def text(self, upto: date | None = None) -> str:
        body = [t for d, t in self.lines if upto is None or d <= upto]
        return self.head + "".join(t + "\n" for t in body)

    def last_day(self, upto: date) -> date | None:
        days = [d for d, _ in self.lines if d <= upto]
        return max(days) if days else None


@dataclass
class World:
    today: date
    first: date
    files: dict[str, Draft]
    born: dict[str, date]  # the day a file appears
    held_out: list[Question]  # never asked in the stream
    asked: list[Question]  # the stream's wording of the same facts
    events: list[Event]
    pinned: set[str]
    stream_queries: list[str]

    def write(self, root: Path, upto: date) -> list[str]:
        """Write every file as of ``upto`` under ``root`` that changed since (the files whose lines of
        ``upto``'s week or earlier are not on disk yet); mtimes are the day of the file's last line, 20:00
        UTC. Returns the paths written."""
        written = []
        for rel, draft in self.files.items():
            if self.born[rel] > upto:
                continue
            text = draft.text(upto)
            path = root / rel
            if path.is_file() and path.read_text(encoding="utf-8") == text:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            last = draft.last_day(upto) or self.born[rel]
            stamp = sim_time(last, 20)
            os.utime(path, (stamp, stamp))
            written.append(rel)
        return written


def sim_time(day: date, hour: float) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() + hour * 3600


def _poisson(r: random.Random, rate: float) -> int:
    n, t = 0, r.expovariate(1.0) if rate > 0 else 2.0
    while rate > 0 and t < rate:
        n += 1
        t += r.expovariate(1.0)
    return n


def _slots(r: random.Random, pools: dict[str, tuple[str, ...]], taken: set[str]) -> dict[str, str]:
    out = {}
    for key, pool in pools.items():
        free = [v for v in pool if v not in taken] if pool is NAMES else list(pool)
        out[key] = r.choice(free or list(pool))
        if pool is NAMES:
            taken.add(out[key])
    return out


@dataclass
class _Fact:
    topic: str
    place: str
    day: int
    text: str
    ask: str
    held_out: str
    rel: str = ""


def build(seed: int, days: int, rate: float, oneoff_rate: float, data: Path, today: date = TODAY) -> World:
    """The world of ``days`` days ending on ``today``: files, the usage stream, the held-out questions."""
    r = random.Random(seed)
    turns = locomo_turns(data)
    first = today - timedelta(days=days - 1)
    day_of = [first + timedelta(days=i) for i in range(days)]
    files: dict[str, Draft] = {"MEMORY.md": Draft(MEMORY_HEAD)}
    born: dict[str, date] = {"MEMORY.md": first}
    chatter_at: list[tuple[int, str]] = []  # (day index, one-off lookup query)

    def add(rel: str, i: int, text: str, head: str) -> None:
        if rel not in files:
            files[rel], born[rel] = Draft(head), day_of[i]
        files[rel].lines.append((day_of[i], text))

    def to_log(i: int, text: str) -> str:
        rel = f"memory/{day_of[i]:%Y-%m-%d}.md"
        stamp = f"- {r.randint(7, 22):02d}:{r.choice((0, 5, 10, 15, 20, 30, 40, 45, 50)):02d} "
        add(rel, i, stamp + text, f"# {day_of[i]:%Y-%m-%d}\n\n")
        return rel

    for i in range(days):
        for _ in range(r.randint(2, 7)):
            line, query = chatter(r, turns)
            to_log(i, line)
            chatter_at.append((i, query))
    titles = dict(NOTE_TITLES)
    taken: set[str] = set()
    active: dict[str, tuple[int, int]] = {}
    facts: list[_Fact] = []
    for key, recurring, place, pools, mentions, texts in TOPICS:
        slots = _slots(r, pools, taken)
        if recurring:
            start, end = r.randrange(0, max(1, int(days * 0.7))), days - 1
        else:  # asked about for half a year to four years, ending at least a fifth of the span before today
            start = r.randrange(0, max(1, int(days * 0.3)))
            end = min(start + r.randint(min(days // 6, 540), min(days // 2, 1460)), days - 1 - days // 5)
            end = max(end, start + 1)
        active[key] = (start, end)
        fact_days = sorted(r.randrange(start, max(start + 1, (start + end) // 2)) for _ in texts)
        if place == "pinned":  # one day (the wedding): the person pinned its log
            fact_days = [fact_days[0]] * len(texts)
        for d, (statement, ask, held) in zip(fact_days, texts, strict=True):
            facts.append(_Fact(key, place, d, statement.format(**slots), ask.format(**slots), held.format(**slots)))
        for i in range(start, end + 1):
            if mentions and r.random() < 1 / 45:
                to_log(i, r.choice(mentions).format(**slots))
        if "friend" in slots:
            titles["memory/people/friend.md"] = titles["memory/people/friend.md"].format(**slots)
    pinned: set[str] = set()
    for f in sorted(facts, key=lambda f: f.day):
        if f.place in ("daily", "pinned"):
            f.rel = to_log(f.day, f.text)
            if f.place == "pinned":
                pinned.add(f.rel)
        elif f.place == "root":
            f.rel = "MEMORY.md"
            add(f.rel, f.day, f"- {f.text}", MEMORY_HEAD)
        else:
            f.rel = f.place.split(":", 1)[1]
            add(f.rel, f.day, f"- {day_of[f.day]:%Y-%m-%d}: {f.text}", titles[f.rel] + "\n\n")
    for i in sorted(r.sample(range(days), max(1, days // 40))):  # recipes: a note never asked about by topic
        add("memory/recipes.md", i, f"- {chatter(r, [])[0]}", titles["memory/recipes.md"] + "\n\n")
    # pins a person made for their own reasons; half by front matter, half by a marker line
    pinned |= {f"memory/{day_of[i]:%Y-%m-%d}.md" for i in r.sample(range(days), min(days, 8))}
    for rel, draft in files.items():
        if rel.startswith("memory/20"):
            draft.lines.sort(key=lambda x: x[1])  # the times of day in order
    for n, rel in enumerate(sorted(pinned)):
        head = files[rel].head
        files[rel].head = "---\npinned: true\n---\n" + head if n % 2 == 0 else head + "<!-- pin -->\n"
    recurring = {key for key, rec, *_ in TOPICS if rec}
    held_out, asked_questions = [], []
    for f in facts:
        draft = files[f.rel]
        n = next(n for n, (_, t) in enumerate(draft.lines) if t.endswith(f.text))
        group = {"daily": "recurring" if f.topic in recurring else "dormant", "pinned": "pinned"}.get(f.place, "notes")
        gold = frozenset({(f.rel, draft.head.count("\n") + n + 1)})
        held_out.append(Question(f.held_out, gold, group, f.topic, f.text))
        asked_questions.append(Question(f.ask, gold, group, f.topic, f.text))
    asked: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for f in facts:
        asked[f.topic].append((f.day, f.ask))
    events = _stream(r, day_of, active, asked, chatter_at, rate, oneoff_rate)
    queries = sorted({e.query for e in events})
    return World(today, first, files, born, held_out, asked_questions, events, pinned, queries)


def _stream(
    r: random.Random,
    day_of: list[date],
    active: dict[str, tuple[int, int]],
    asked: dict[str, list[tuple[int, str]]],
    chatter_at: list[tuple[int, str]],
    rate: float,
    oneoff_rate: float,
) -> list[Event]:
    """The questions of the ten years: each day, ``rate`` topic questions on average (a topic active that day,
    the more popular ones, by their order in TOPICS, asked more; a fact stated before that day) and
    ``oneoff_rate`` one-off ones (a chatter line of an earlier day)."""
    weights = {key: 1 / (n + 1) ** 0.7 for n, (key, *_) in enumerate(TOPICS)}
    out = []
    for i, day in enumerate(day_of):
        live = [k for k, (s, e) in active.items() if s <= i <= e and any(d < i for d, _ in asked[k])]
        for _ in range(_poisson(r, rate) if live else 0):
            key = r.choices(live, [weights[k] for k in live])[0]
            _, query = r.choice([f for f in asked[key] if f[0] < i])
            out.append(Event(sim_time(day, r.uniform(7, 23)), query, _kind(r), key))
        for _ in range(_poisson(r, oneoff_rate) if i > 0 else 0):
            j = r.randrange(0, len(chatter_at))
            if chatter_at[j][0] < i:
                out.append(Event(sim_time(day, r.uniform(7, 23)), chatter_at[j][1], _kind(r), ""))
    return sorted(out, key=lambda e: e.at)


def _kind(r: random.Random) -> str:
    x = r.random()
    return "pack" if x < 0.5 else "search" if x < 0.85 else "get"
