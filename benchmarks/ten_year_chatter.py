"""The one-off chatter of benchmarks/ten_year.py's daily logs: what a person jots down once and never asks
about again (mostly), from several generators with vocabularies of their own, some of whose words (car,
doctor, house, school, names, cities) the recurring topics use too, so keyword search is not trivially easy.

Each generator returns ``(line, query)``: the line for the log, and how someone would later look it up once
(the usage stream's one-off questions).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path

from ten_year_topics import CITIES, NAMES, SURNAMES

Chatter = tuple[str, str]

DISHES = "risotto curry frittata stew tagine lasagne soup pancakes dal ramen paella chili gratin".split()
INGREDIENTS = "fennel leek chickpea mushroom pumpkin spinach lentil aubergine chorizo halloumi kale".split()
SPICES = ("cumin", "lemon", "garlic", "smoked paprika", "ginger", "chili flakes", "cardamom", "sumac")
SHOPS = "Hema Action Ikea Gamma Blokker Albert Heijn Lidl Decathlon Praxis Kruidvat Bol".split()
ITEMS = (
    "a drill bit set, a laundry basket, two lamps, a doormat, running socks, a kettle, picture hooks, "
    "a phone charger, a bath mat, printer ink, light bulbs, a rain jacket, seed potatoes, a car phone holder"
).split(", ")
FILMS = (
    "Dune, Past Lives, The Bear, Severance, Slow Horses, Perfect Days, Aftersun, Shogun, Oppenheimer, "
    "The Holdovers, Fallen Leaves, Andor, Station Eleven, Blue Eye Samurai, The Rehearsal, Succession"
).split(", ")
OPINIONS = (
    "loved it",
    "too long",
    "fell asleep halfway",
    "great soundtrack",
    "the ending made no sense",
    "rewatchable",
)
PLACES = "the canal, the park, the river dike, the old harbour, the dunes, the ring road, the woods".split(", ")
SYSTEMS = "billing cache queue scheduler login search export importer webhook dashboard".split()
ISSUES = ("timeout", "memory leak", "race condition", "flaky test", "deadlock", "slow query", "bad deploy")
SUBJECTS = (
    "school choices, house prices, the election, a new car, her doctor, board games, their renovation, "
    "moving abroad, pensions, the football, sourdough, a podcast about whales"
).split(", ")
WEATHER = "drizzle, fog, a heatwave, hail, strong wind, black ice, a thunderstorm, the first frost".split(", ")
TRANSPORT = "the tram, the 8:12 train, the bus, the ferry, the night train".split(", ")
THOUGHTS = (
    "write a script that renames the holiday photos by date",
    "a shared calendar for the household chores",
    "learn to sharpen knives properly",
    "move the desk next to the window",
    "a spreadsheet for the electricity meter readings",
    "ask the neighbours about a joint hedge trimmer",
    "try the cold shower thing for a week",
    "a board game evening once a month",
)


def _meal(r: random.Random) -> Chatter:
    dish, ing, sp = r.choice(DISHES), r.choice(INGREDIENTS), r.choice(SPICES)
    return f"Tried a {ing} {dish}; too much {sp}, would make again with less.", f"that {ing} {dish} I cooked"


def _shopping(r: random.Random) -> Chatter:
    item, shop, price = r.choice(ITEMS), r.choice(SHOPS), r.randint(3, 89)
    return f"Bought {item} at {shop} for {price} euros.", f"where did I buy {item}"


def _media(r: random.Random) -> Chatter:
    film = r.choice(FILMS)
    return f"Watched {film} — {r.choice(OPINIONS)}.", f"what did I think of {film}"


def _exercise(r: random.Random) -> Chatter:
    km, place = r.randint(3, 21), r.choice(PLACES)
    return f"Ran {km} km along {place}, legs heavy at the end.", f"my {km} km run along {place}"


def _work(r: random.Random) -> Chatter:
    who, sysname, issue = r.choice(NAMES), r.choice(SYSTEMS), r.choice(ISSUES)
    return (
        f"Standup: {who} is chasing a {issue} in the {sysname} service, rollback if not fixed by Friday.",
        f"the {issue} in the {sysname} service",
    )


def _social(r: random.Random) -> Chatter:
    who, city, subject = f"{r.choice(NAMES)} {r.choice(SURNAMES)}", r.choice(CITIES), r.choice(SUBJECTS)
    return f"Coffee with {who} (visiting from {city}); we talked about {subject}.", f"when did I meet {who}"


def _commute(r: random.Random) -> Chatter:
    w, t = r.choice(WEATHER), r.choice(TRANSPORT)
    return f"{w.capitalize()} all morning, {t} was late, got in at ten.", f"the day {t} was late in the {w}"


def _thought(r: random.Random) -> Chatter:
    idea = r.choice(THOUGHTS)
    return f"Idea: {idea}.", f"my idea to {idea.split(' ', 1)[1] if ' ' in idea else idea}"


def _errand(r: random.Random) -> Chatter:
    what = r.choice(
        (
            "Parked the car in the wrong zone, 65 euro fine.",
            "Doctor's waiting room was full; read a magazine about houses.",
            "Returned the library books, two weeks late.",
            "School run chaos, forgot the lunch boxes.",
            "Post office queue for a parcel that was not there.",
            "Hairdresser moved the appointment to Thursday.",
        )
    )
    words = re.findall(r"[A-Za-z]{5,}", what)[:3]
    return what, " ".join(words).lower()


GENERATORS: tuple[Callable[[random.Random], Chatter], ...] = (
    _meal,
    _shopping,
    _media,
    _exercise,
    _work,
    _social,
    _commute,
    _thought,
    _errand,
)


def locomo_turns(data: Path) -> list[str]:
    """Conversation turns of the LoCoMo dev set (``Speaker: text``), when ../shared holds it; else none."""
    if not data.is_file():
        return []
    out = []
    for sample in json.loads(data.read_text(encoding="utf-8")):
        for key, turns in sample["conversation"].items():
            if re.fullmatch(r"session_\d+", key):
                out += [" ".join(f"{t['speaker']}: {t['text']}".split()) for t in turns if t.get("text")]
    return out


def chatter(r: random.Random, turns: list[str]) -> Chatter:
    """One line of one-off chatter: a generator's, or (one in five, when there are any) a LoCoMo turn."""
    if turns and r.random() < 0.2:
        turn = r.choice(turns)
        words = re.findall(r"[A-Za-z]{6,}", turn)[:3]
        return turn, " ".join(words).lower() or turn[:40]
    return r.choice(GENERATORS)(r)
