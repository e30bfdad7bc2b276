"""What the person of benchmarks/ten_year.py keeps coming back to: recurring topics (a sister, a car, a
medication routine, a house...), each with a few facts and the questions asked about them.

A topic is ``(key, recurring, place, slots, mentions, facts)``:

- ``recurring``: asked about until the simulated today; False: a dormant topic (an old job, a sold car), asked
  about for a few years, then never again;
- ``place``: where its facts are written: ``daily`` (a line in a daily log), ``note:<path>`` (a memory/ note
  of its own), ``root`` (MEMORY.md) or ``pinned`` (a daily log the person pinned);
- ``slots``: the values drawn for this run (``{name}`` in the texts), from pools;
- ``mentions``: lines that name the topic without answering anything (distractors for the search);
- ``facts``: ``(statement, question asked in the usage stream, held-out question)``; the held-out question is
  never asked before the measurement.

Texts are plain data; ``ten_year_world`` draws the slots and writes them out.
"""

from __future__ import annotations

Fact = tuple[str, str, str]
Topic = tuple[str, bool, str, dict[str, tuple[str, ...]], tuple[str, ...], tuple[Fact, ...]]

NAMES = (
    "Maya Ines Tobias Rafael Greta Jonah Lena Omar Noor Felix Ada Milan Saskia Theo Ilse Marco Yara Bram Elif "
    "Hugo Petra Sami Vera Joris Anouk Kasper Lotte Ruben Femke Daan"
).split()
SURNAMES = "Visser Okafor Brandt Moreau Haddad Lindqvist Novak Costa Ferreira Tanaka Kowalski Ibarra".split()
CITIES = "Utrecht Leiden Ghent Porto Lyon Aarhus Graz Bilbao Tallinn Turin Bergen Malmo Zwolle Delft".split()
MONTHS = "January February March April May June July August September October November December".split()


def _n(lo: int, hi: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(lo, hi))


TOPICS: tuple[Topic, ...] = (
    ("sister", True, "daily",
     {"sister": NAMES, "city": CITIES, "kid": NAMES, "kid2": NAMES, "month": MONTHS, "day": _n(2, 28),
      "job": ("midwife", "radiographer", "pharmacist", "physiotherapist")},
     ("Long call with {sister}, mostly about nothing.", "{sister} sent photos of the kids at the beach."),
     (("{sister} moved into a flat in {city}, third floor, no lift.", "Where does {sister} live now?",
       "Which city did my sister {sister} move to?"),
      ("{sister}'s kids are {kid} (the older one) and {kid2}.", "What are the names of {sister}'s kids?",
       "who are {sister}'s children"),
      ("{sister} started working as a {job} at the regional hospital.", "What is {sister}'s job?",
       "what does my sister {sister} do at the hospital"),
      ("{sister}'s birthday is {month} {day}; she always says no presents.", "When is {sister}'s birthday?",
       "which day should I call {sister} for her birthday"))),
    ("car", True, "daily",
     {"model": ("Skoda Octavia", "Volvo V60", "Toyota Corolla", "Kia Ceed"), "plate": ("KX-482-T", "HB-19-PL",
      "TZ-770-N", "RR-305-K"), "tyre": ("205/55 R16", "225/45 R17", "195/65 R15"), "garage": ("Autohaus Brink",
      "Garage De Wit", "Van Dam Motors"), "insurer": ("Centraal Beheer", "ANWB", "Allianz")},
     ("Drove the {model} to the coast, traffic everywhere.", "Washed the {model}, finally."),
     (("Bought the {model} today, plate {plate}.", "What is the licence plate of the {model}?",
       "registration number of my car"),
      ("Tyres on the {model} are {tyre}; the winter set is stored at {garage}.", "What tyre size does the {model} "
       "take?", "where are the winter tyres kept and what size are they"),
      ("{model} service at {garage}: every 15,000 km or once a year.", "Which garage services the {model}?",
       "how often does the car need a service"),
      ("Car insurance for the {model} renewed with {insurer}.", "Who insures the {model}?",
       "which company is the car insurance with"))),
    ("thyroid", True, "daily",
     {"drug": ("levothyroxine", "Euthyrox", "Thyrax"), "dose": ("75", "88", "100", "112"), "doctor": SURNAMES,
      "pharmacy": ("Kruidvat", "Boots", "De Linde", "Apotheek Zuid"), "n": ("three", "four", "six")},
     ("Forgot the {drug} this morning, took it at ten.", "Felt tired all afternoon, maybe the thyroid again."),
     (("Dr. {doctor} raised the {drug} dose to {dose} micrograms, before breakfast.", "What dose of {drug} do I "
       "take?", "how many micrograms is my thyroid medication"),
      ("Repeat prescription of {drug} is collected at {pharmacy} every eight weeks.", "Where do I pick up the "
       "{drug} prescription?", "which pharmacy has my thyroid prescription"),
      ("Thyroid blood test every {n} months, no fasting needed.", "How often is the thyroid blood test?",
       "when do I need another blood test for the thyroid"))),
    ("house", True, "note:memory/house.md",
     {"boiler": ("Remeha Tzerra", "Vaillant ecoTEC", "Intergas Kombi"), "plumber": NAMES, "rate": ("1.9", "2.4",
      "3.1"), "year": _n(2031, 2046)},
     ("The house was freezing this morning.", "Cleaned the gutters of the house."),
     (("Boiler is a {boiler}; {plumber} the plumber services it every October.", "What boiler do we have?",
       "who services the heating and when"),
      ("Mortgage fixed at {rate}% until {year}.", "What is the mortgage rate?",
       "until when is the mortgage interest fixed"),
      ("Main water stopcock is under the stairs, behind the hoover.", "Where is the water stopcock?",
       "how do I turn off the water in the house"))),
    ("dog", True, "daily",
     {"dog": ("Pepper", "Biscuit", "Moos", "Juno"), "vet": SURNAMES, "food": ("Royal Canin light",
      "Acana Heritage", "Brit Care salmon"), "chip": _n(528140, 528199)},
     ("Long walk with {dog} in the rain.", "{dog} stole a sandwich off the table."),
     (("{dog}'s vet is Dr. {vet}; the yearly vaccination is in spring.", "Who is {dog}'s vet?",
       "when are the dog's vaccinations due"),
      ("{dog} eats {food}, two scoops a day, no more.", "What food does {dog} eat?",
       "how much should the dog be fed"),
      ("{dog}'s microchip number ends in {chip}.", "What is {dog}'s microchip number?",
       "the chip number of our dog"))),
    ("heron", True, "note:memory/projects/heron.md",
     {"pm": NAMES, "repo": ("heron-core", "heron-api", "heron-mono"), "db": ("PostgreSQL 15", "CockroachDB",
      "MySQL 8"), "q": ("Q2", "Q3", "Q4")},
     ("Heron standup ran long again.", "Heron demo went fine, nobody asked questions."),
     (("Project Heron: {pm} is the product manager, code in the {repo} repo.", "Who is the product manager of "
       "Heron?", "who runs project Heron"),
      ("Heron stores everything in {db}; migrations run on deploy.", "Which database does Heron use?",
       "what database is behind Heron"),
      ("Heron launch planned for {q}, after the security review.", "When does Heron launch?",
       "what is the Heron release date"))),
    ("dentist", True, "root",
     {"dentist": SURNAMES, "clinic": ("Tandartspraktijk Oost", "Smile Studio", "Dental Care Centre")},
     (),
     (("Dentist: Dr. {dentist} at {clinic}, check-up every six months.", "Who is my dentist?",
       "which dental clinic do I go to"),)),
    ("mum", True, "daily",
     {"neighbour": NAMES, "allergy": ("penicillin", "shellfish", "ibuprofen"), "home": ("De Hoge Weide",
      "Rosendael", "Het Anker")},
     ("Visited Mum, she was in good spirits.", "Mum phoned twice about the television remote."),
     (("Mum is allergic to {allergy}; it is in her file at the GP.", "What is Mum allergic to?",
       "which medicine must Mum never get"),
      ("Mum's neighbour {neighbour} has a spare key to her flat.", "Who has a spare key to Mum's flat?",
       "if Mum is locked out who can open the door"),
      ("Mum moved into {home}, room 14, visiting hours until eight.", "Which care home is Mum in?",
       "until when can I visit Mum"))),
    ("allotment", True, "daily",
     {"plot": _n(11, 90), "chair": NAMES, "fee": ("45", "60", "72")},
     ("Weeded the allotment for two hours.", "The allotment beans are finally coming up."),
     (("Allotment is plot {plot}; the gate code changes every spring.", "What is my allotment plot number?",
       "which plot is ours at the allotments"),
      ("Allotment fee is {fee} euros a year, paid to {chair}.", "How much is the allotment fee?",
       "who do I pay for the allotment"))),
    ("piano", True, "daily",
     {"teacher": NAMES, "weekday": ("Monday", "Tuesday", "Wednesday", "Thursday"), "grade": ("2", "3", "4")},
     ("Noah practised piano without being asked!", "Piano practice was a fight again."),
     (("Noah's piano lessons with {teacher} are on {weekday} at half past four.", "When are Noah's piano lessons?",
       "which day does Noah have piano"),
      ("Noah passed his grade {grade} piano exam.", "Which piano grade did Noah pass?",
       "what level is Noah at in piano"))),
    ("taxes", True, "daily",
     {"accountant": NAMES, "ref": _n(4410, 4499), "deadline": ("May 1", "April 30", "June 1")},
     ("Spent the evening on tax paperwork.", "Found old tax receipts in a shoebox."),
     (("{accountant} does our tax return; client reference {ref}.", "Who does our tax return?",
       "my client number at the accountant"),
      ("Tax return deadline is {deadline}; {accountant} wants the papers a month before.", "When is the tax "
       "return due?", "when must the tax papers go to the accountant"))),
    ("network", True, "daily",
     {"isp": ("Ziggo", "KPN", "Odido"), "router": ("Fritzbox 7590", "Eero Pro", "Ubiquiti Dream Machine")},
     ("Internet was down for an hour again.", "Reset the router, video calls are smooth now."),
     (("Internet is from {isp}; the contract ends every two years in March.", "Who is our internet provider?",
       "when does the internet contract end"),
      ("New router: {router}, admin page at 192.168.178.1.", "What router do we have?",
       "how do I reach the router admin page"))),
    ("bike", True, "daily",
     {"bike": ("Gazelle Ultimate", "Cube Kathmandu", "VanMoof S3"), "frame": ("57", "58", "61"),
      "shop": ("Fietsenmaker Jansen", "Bike Totaal", "Rijwielhuis Dekker")},
     ("Cycled to work, headwind both ways.", "Flat tyre on the bike again."),
     (("Bought a {bike} e-bike at {shop}, frame {frame} cm.", "Which bike do I ride?",
       "where did I buy the e-bike"),
      ("Bike battery lasts about 60 km; {shop} replaces it under warranty.", "How far does the bike battery go?",
       "who replaces the e-bike battery"))),
    ("friend", True, "note:memory/people/friend.md",
     {"friend": NAMES, "partner": NAMES, "city": CITIES, "band": ("The Slow Tides", "Orchard", "Night Ferry")},
     ("Drinks with {friend}, stayed out too late.", "{friend} sent a terrible pun."),
     (("{friend} lives in {city} with {partner}.", "Where does {friend} live?", "who is {friend}'s partner"),
      ("{friend} plays bass in {band}.", "What band is {friend} in?", "which group does {friend} play with"))),
    ("wedding", False, "pinned",
     {"venue": ("Kasteel Wittenburg", "De Oude Hortus", "Fort Abcoude"), "month": MONTHS, "day": _n(2, 28)},
     ("Wedding planning spreadsheet is getting out of hand.",),
     (("We got married at {venue}; anniversary {month} {day}.", "Where did we get married?",
       "when is our wedding anniversary"),)),
    ("oldjob", False, "daily",
     {"boss": NAMES, "office": ("Stationsplein 12", "Kanaalweg 4", "Herengracht 310"), "badge": _n(7001, 7099)},
     ("Another all-hands at the old office.", "Lunch at the canteen, the soup was cold."),
     (("My manager at Tessel is {boss}; office at {office}.", "Who is my manager at Tessel?",
       "where is the Tessel office"),
      ("Tessel badge number {badge}, parking on level two.", "What is my Tessel badge number?",
       "where do I park at Tessel"))),
    ("oldcar", False, "daily",
     {"model": ("Fiat Panda", "Opel Corsa", "Renault Clio"), "plate": ("ZL-04-XB", "88-KTT-2", "PJ-311-V")},
     ("The {model} made that rattling noise again.",),
     (("The {model} (plate {plate}) passed its MOT, barely.", "What was the plate of the {model}?",
       "the old car's registration"),
      ("{model} needs a new clutch, quote 900 euros.", "How much was the clutch quote for the {model}?",
       "what did the old car's clutch cost"))),
    ("spanish", False, "daily",
     {"teacher": NAMES, "weekday": ("Monday", "Wednesday", "Thursday"), "book": ("Aula 2", "Nuevo Prisma",
      "Gente Hoy")},
     ("Spanish homework took all evening.",),
     (("Spanish class with {teacher} on {weekday} evenings, room B3.", "When is Spanish class?",
       "who teaches my Spanish course"),
      ("Spanish course book is {book}, unit 6 next.", "Which Spanish book do we use?",
       "what textbook for the language class"))),
)  # fmt: skip
