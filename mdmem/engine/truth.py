"""``truth``: what is currently true about a subject, the chain of earlier versions with their dates and refs,
and the notes supporting each (the view is assembled by mdmem.search.truth; this reads what it needs).

The subject is searched for like any query (hybrid, ``TRUTH_CANDIDATES`` results, no ``minScore``); the lines of
the results that name the most of the subject's words are its lines. The supersessions touching their files
are followed, file by file, up to ``MAX_HOPS`` files away, so a chain whose current line does not name the
subject (``She is back in Lisbon``) is complete. Line texts are the index's (mdmem.store.lines), so ``truth``
answers where the index is (a replica) and says only what the last sync saw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdmem.search.truth import facts_about, mentions
from mdmem.store.lines import file_lines

if TYPE_CHECKING:
    from mdmem.search.hybrid import SearchOutcome
    from mdmem.store.api import IndexStore

TRUTH_CANDIDATES = 20
MAX_HOPS = 4


def truth_view(store: IndexStore, subject: str, outcome: SearchOutcome, max_facts: int) -> dict[str, Any]:
    """``{subject, facts: [{current, history}]}`` (mdmem.search.truth.Fact.to_dict), texts redacted."""
    from mdmem.util.redaction import redact

    texts: dict[str, list[str]] = {}

    def lines_of(path: str) -> list[str]:
        if path not in texts:
            texts[path] = file_lines(store.chunks_of(path))
        return texts[path]

    scored: list[tuple[int, int, tuple[str, int]]] = []
    for rank, hit in enumerate(outcome.hits):
        c = hit.chunk
        held = lines_of(c.path)
        for n in range(c.start_line, min(c.end_line, len(held)) + 1):
            text = held[n - 1]
            if text.strip() and not text.lstrip().startswith("#") and (m := mentions(subject, text)):
                scored.append((m, rank, (c.path, n)))
    best = max((m for m, _, _ in scored), default=0)
    about = list(dict.fromkeys(k for m, _, k in sorted(scored, key=lambda s: (-s[0], s[1])) if m == best))
    paths = {p for p, _ in about}
    supersessions = store.supersessions_touching(sorted(paths)) if paths else []
    for _ in range(MAX_HOPS):
        more = {p for s in supersessions for p in (s.old_path, s.new_path) if p} - paths
        if not more:
            break
        paths |= more
        supersessions = store.supersessions_touching(sorted(paths))
    supersessions += [s for s in outcome.supersessions if not s.path]  # implicit (mdmem.search.grouping)
    lines: dict[tuple[str, int], str] = {}
    for key in [
        *about,
        *((s.old_path, s.old_line) for s in supersessions),
        *((s.new_path, s.new_line) for s in supersessions),
    ]:
        path, n = key
        held = lines_of(path) if path else []
        if 1 <= n <= len(held) and held[n - 1].strip():
            lines[key] = held[n - 1]
    facts = [f.to_dict() for f in facts_about(subject, about, lines, supersessions, max_facts=max_facts)]
    for fact in facts:
        for version in [fact["current"], *fact["history"]]:
            if version is not None:
                version["text"] = redact(version["text"])
    return {"subject": subject, "facts": facts}
