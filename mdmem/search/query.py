"""The query side of keyword search, pure: terms, stop words, identifier phrases, CJK runs, accent folding,
exact hits.

Used by the search (mdmem.search.hybrid), the pack's trimming (mdmem.pack.build, mdmem.pack.trim) and the
stores' keyword plans; no I/O.

Identifiers: a query token whose word parts are joined by ``- . _ / : \\ @ # + ~`` (``Nimbus-14``,
``PROJ-123``, ``v2.3.1``, ``db-02.prod``, ``snake_case``, ``src/app.py``) is searched as its parts and,
beside them, as the phrase of its parts (``"nimbus 14"``: the parts adjacent, in order), so a chunk that
holds the identifier outranks chunks that hold its parts apart.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from mdmem.util.tokens import CJK_RUN

# Function words dropped from the keyword query when it has other terms: they match nearly every chunk,
# carry almost no BM25 weight, and make FTS5 score every row. Exact-hit detection still uses all terms.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    tell say said know remember recall""".split()
)
MAX_QUERY_TERMS = 64
MAX_PHRASE_PARTS = 16  # an identifier of more parts (a long path) is searched by its parts only
WORD = re.compile(r"\w+", re.UNICODE)
PART = re.compile(r"[^\W_]+")  # a word part: letters and digits (an underscore joins parts)
IDENTIFIER = re.compile(r"[^\W_]+(?:[-._/:\\@#+~]+[^\W_]+)+")
NON_ASCII = re.compile(r"[^\x00-\x7f]")


def query_terms(query: str) -> list[str]:
    """Unicode word tokens of ``query``, lower-cased and de-duplicated, in order."""
    seen: dict[str, None] = {}
    for tok in WORD.findall(query.lower()):
        tok = tok.strip("_")
        if tok:
            seen.setdefault(tok, None)
    return list(seen)[:MAX_QUERY_TERMS]


def keyword_terms(terms: Sequence[str]) -> list[str]:
    """The terms worth sending to FTS5: stop words are dropped unless nothing else is left."""
    content = [t for t in terms if t not in STOP_WORDS]
    return content or list(terms)


def identifier_phrases(query: str) -> list[str]:
    """The phrases of the compound identifiers in ``query``: each identifier's parts, lower-cased and
    space-joined (``Nimbus-14`` -> ``nimbus 14``), de-duplicated, in order. Identifiers holding CJK text are
    left to the trigram search."""
    seen: dict[str, None] = {}
    for found in IDENTIFIER.findall(query.lower()):
        parts = PART.findall(found)
        if 2 <= len(parts) <= MAX_PHRASE_PARTS and not CJK_RUN.search(found):
            seen.setdefault(" ".join(parts), None)
    return list(seen)[:MAX_QUERY_TERMS]


def keyword_query(query: str, terms: Sequence[str]) -> list[str]:
    """What the keyword search asks the store for: the content terms (``keyword_terms``), a term of
    underscore-joined parts as its parts, then the identifier phrases of ``query``. A term holding a space is
    a phrase (the stores match its parts adjacent and in order)."""
    out: dict[str, None] = {}
    for term in keyword_terms(terms):
        for part in PART.findall(term) if "_" in term else [term]:
            out.setdefault(part, None)
    for phrase in identifier_phrases(query):
        out.setdefault(phrase, None)
    return list(out)


def phrase_pattern(phrase: str) -> str:
    """A regular expression (for lower-cased text) of a phrase written as an identifier: its parts, whole,
    joined by anything but letters and digits (``nimbus 14`` finds ``Nimbus-14``, ``nimbus_14``, ``Nimbus
    14``). Parts match as written: the pack and snippets do not stem, as FTS5 does."""
    return r"(?<![^\W_])" + r"[\W_]+".join(re.escape(p) for p in phrase.split()) + r"(?![^\W_])"


def cjk_match(query: str) -> tuple[list[str], list[str]]:
    """For CJK runs in ``query``: the overlapping character trigrams of runs of 3+ characters, and the
    shorter runs, which a trigram index cannot match, as substrings."""
    trigrams: dict[str, None] = {}
    short: dict[str, None] = {}
    for run in CJK_RUN.findall(query):
        if len(run) >= 3:
            for i in range(len(run) - 2):
                trigrams.setdefault(run[i : i + 3], None)
        else:
            short.setdefault(run, None)
    return list(trigrams)[:MAX_QUERY_TERMS], list(short)[:8]


def fold(text: str) -> str:
    """Lower-case and strip accents, as the FTS5 tokenizer does."""
    lower = text.lower()
    if lower.isascii():
        return lower
    decomposed = unicodedata.normalize("NFKD", lower)  # only non-ASCII characters can be combining marks
    return NON_ASCII.sub(lambda m: "" if unicodedata.combining(m[0]) else m[0], decomposed)


def contains_all_terms(text: str, terms: Sequence[str], query: str = "") -> bool:
    """True when ``text`` contains every query term: words as whole words, CJK runs as substrings."""
    if not terms:
        return False
    folded = fold(text)
    words = set(WORD.findall(CJK_RUN.sub(" ", folded)))
    for term in terms:
        t = fold(term)
        if CJK_RUN.search(t):
            if not all(run in folded for run in CJK_RUN.findall(t)):
                return False
            rest = CJK_RUN.sub(" ", t).split()
            if any(w not in words for w in rest):
                return False
        elif not all(w in words for w in WORD.findall(t)):
            return False
    return True
