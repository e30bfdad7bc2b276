"""A paraphrase set for calibrating scores: a realistic workspace and questions that share no word with the
note they ask about.

The workspace is a MEMORY.md and two weeks of daily logs; each file holds several notes, and most notes are
distractors (other pets, other trips, other appointments) for some question. Each ``Pair`` names the note
that answers its question by one of the note's lines. tests/test_paraphrase.py checks, with the project's
own tokenizer, stop words and the index's porter stemmer, that a question shares no content word and no
stem with its note (heading included); benchmarks/paraphrase.py prints the scores they get.
"""

from __future__ import annotations

from dataclasses import dataclass

FILES = {
    "MEMORY.md": """# Long-term memory

## People
Dana is my partner; her birthday is 4 February and she adores tulips. Her brother Tom lives in Leeds.

## Diet
Allergic to peanuts: always carry the EpiPen. Vegetarian since 2019, no fish either.

## Job
Staff engineer at Fernwood Labs on the payments team, reporting to Priya. Standup is at 9:45.

## Network
The router admin page is at 192.168.1.1; the guest wifi password rotates monthly.

## Health
Blood type O negative. Cetirizine 10 mg each spring against hay fever.

## Preferences
Coffee order: oat flat white, no sugar. Dislikes cilantro and very spicy curries.
""",
    "memory/2025-03-01.md": """# 2025-03-01

## Miso
Miso, the tabby, now gets thyroid pills twice daily hidden in wet food. Bloodwork on 14 March at 9:30.

## Rex
Rex the spaniel is booked with the dog sitter for next weekend; leave his lead and the chew toys.

## Groceries
Out of oat milk and basmati rice; the farmers market on Saturday has good leeks.
""",
    "memory/2025-03-02.md": """# 2025-03-02

## Lisbon
Booked TAP flights to Lisbon for 3-10 June, aisle seats and one checked bag. Hotel in Alfama near the castle.

## Berlin
Train to Berlin for PyCon DE on 22 April; Deutsche Bahn tickets are in the email, staying with Jonas.

## Scotland
Thinking about a hiking trip to Skye in September; hostels there fill up by May.
""",
    "memory/2025-03-03.md": """# 2025-03-03

## Backups
restic runs nightly at 02:00 from the NAS to Backblaze B2; retention keeps 7 daily and 4 weekly snapshots.

## Laptop
Laptop SSD almost full: moved old photos to the external USB drive and emptied the trash.

## Printer
The printer jams on thick paper; ordered a replacement tray and black ink cartridges.
""",
    "memory/2025-03-04.md": """# 2025-03-04

## Sourdough
Starter fed with rye flour at 8am; the loaf proofed overnight in the fridge and baked at 250C in the Dutch oven.

## Freeze
Production deploy freeze starts Friday for the quarter-end close; only hotfixes approved by Priya ship.

## Incident
Postmortem for the payments outage: a stale DNS record after the migration; action items filed.
""",
    "memory/2025-03-05.md": """# 2025-03-05

## Running
Ran 10 km along the river in 52 minutes; the left knee felt fine. Half marathon plan begins Monday.

## Taxes
The tax return is due 30 April; the accountant still needs the mortgage interest statement.

## Tyres
Winter tyres come off at the garage on 2 April; the brake pads are at about 30 percent.
""",
    "memory/2025-03-06.md": """# 2025-03-06

## Dentist
Cleaning booked for 20 March at 8:00; ask about the cracked molar on the left.

## Optician
Eye test came back the same prescription; new frames ordered, ready in ten days.

## Plants
Watered the monstera and the fiddle-leaf fig; repotted the snake succulent into terracotta.
""",
    "memory/2025-03-07.md": """# 2025-03-07

## Piano
Piano lesson moved to Thursdays 17:30 with Mrs Okafor; practise scales and the Chopin nocturne.

## Maya
Maya's parent-teacher evening is on 12 May at 18:00 in room 4B; bring the reading log.

## Choir
Choir rehearsal cancelled this week; the spring concert is still on for 5 April.
""",
    "memory/2025-03-08.md": """# 2025-03-08

## Insurance
Renewed the buildings and contents policy with Aviva: premium 412 pounds a year, excess 250.

## Gym
Cancelled the PureGym membership; the last direct debit goes out 1 June.

## Phone
Switched the mobile contract to a SIM-only deal; the old handset goes to Mum.
""",
    "memory/2025-03-09.md": """# 2025-03-09

## Dinner
Hosting Saturday: six guests, mushroom risotto; Lena is coeliac, so no gluten.

## Passport
Passport expires 3 August 2025; renewal form posted with two photos, fee 88.50.

## Visa
The Canada ETA for the October conference was approved within an hour.
""",
    "memory/2025-03-10.md": """# 2025-03-10

## Octopus
Octopus switched our tariff to Agile; the heat pump runs mostly off-peak, 2am to 5am.

## Bookclub
Bookclub picked Piranesi for next month; meeting at Sam's flat on the 18th.

## Boiler
The boiler service is due in April; the engineer charges 90 pounds.
""",
    "memory/2025-03-11.md": """# 2025-03-11

## Mum
Mum's hip replacement is on 9 October at St Mary's; drive her there by 7am.

## Bike
Chain snapped on the commute; the shop on Mill Road fitted a replacement for 25 pounds.

## Parking
Residents' parking permit renewed online; valid until next March.
""",
    "memory/2025-03-12.md": """# 2025-03-12

## Spanish
Duolingo streak at 200 days; booked an italki tutor for Tuesday conversation practice.

## Garden
Sowed tomato and basil seeds in the greenhouse; the frost risk lasts until mid May.

## Savings
Moved 500 pounds into the ISA; the emergency fund now covers four months.
""",
}


@dataclass(frozen=True)
class Pair:
    query: str
    path: str
    line: str  # a unique fragment of one line of the note that answers the query


PAIRS = [
    Pair("How is my kitty's hormone treatment given?", "memory/2025-03-01.md", "thyroid pills"),
    Pair("Which airline carries us to Portugal this summer?", "memory/2025-03-02.md", "TAP flights"),
    Pair("Where will I sleep during the Python event in Germany?", "memory/2025-03-02.md", "PyCon DE"),
    Pair("How are my files copied offsite every evening?", "memory/2025-03-03.md", "restic runs"),
    Pair("How did I free up disk space on the computer?", "memory/2025-03-03.md", "SSD almost full"),
    Pair("How did I make bread recently?", "memory/2025-03-04.md", "Starter fed"),
    Pair("Can we release new code to customers right now?", "memory/2025-03-04.md", "deploy freeze"),
    Pair("How was my jog this morning?", "memory/2025-03-05.md", "Ran 10 km"),
    Pair("What paperwork is missing for the IRS filing deadline?", "memory/2025-03-05.md", "tax return"),
    Pair("When should my vehicle get its seasonal wheel swap?", "memory/2025-03-05.md", "Winter tyres"),
    Pair("When is my next teeth appointment?", "memory/2025-03-06.md", "cracked molar"),
    Pair("What did I do for the indoor greenery?", "memory/2025-03-06.md", "monstera"),
    Pair("When is my weekly music class with the instructor?", "memory/2025-03-07.md", "Mrs Okafor"),
    Pair("When is the school tutor meeting for my daughter?", "memory/2025-03-07.md", "parent-teacher"),
    Pair("How much does protecting the house cost annually?", "memory/2025-03-08.md", "Aviva"),
    Pair("Did I stop paying for the fitness club?", "memory/2025-03-08.md", "PureGym"),
    Pair("Which friend has a wheat intolerance?", "memory/2025-03-09.md", "coeliac"),
    Pair("When does my travel document run out?", "memory/2025-03-09.md", "Passport expires"),
    Pair("Which energy supplier plan do we have?", "memory/2025-03-10.md", "tariff to Agile"),
    Pair("Which novel are we reading together?", "memory/2025-03-10.md", "Piranesi"),
    Pair("When is the surgery for my mother?", "memory/2025-03-11.md", "hip replacement"),
    Pair("What broke on my bicycle on the way to work?", "memory/2025-03-11.md", "Chain snapped"),
    Pair("Which blossoms would my girlfriend enjoy as a gift?", "MEMORY.md", "adores tulips"),
    Pair("Which nut could land me in hospital?", "MEMORY.md", "peanuts"),
    Pair("Who supervises me at the company?", "MEMORY.md", "reporting to Priya"),
    Pair("How do I reach the modem configuration screen?", "MEMORY.md", "router admin"),
]

# Questions the workspace cannot answer: what a search returns when nothing is relevant.
UNANSWERABLE = [
    "What is the airspeed velocity of an unladen swallow?",
    "Who won the 1966 World Cup final?",
    "Explain lattice quantum chromodynamics",
    "Which Roman emperor built the wall in northern Britain?",
    "What is the boiling point of tungsten?",
    "xqzv plorth wibble",
]


def note_of(text: str, fragment: str) -> str:
    """The note (its ``##`` heading line and body) holding the line that contains ``fragment``."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if fragment in line)
    start = max(i for i in range(at + 1) if lines[i].startswith("#"))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end]).strip()


def notes() -> list[tuple[str, str]]:
    """Every note of the workspace as (path, note text), in file order."""
    out = []
    for path, text in FILES.items():
        for block in text.split("\n## ")[1:]:
            out.append((path, "## " + block.strip()))
    return out
