"""``with_replacements``, pure: the current line moves up before each old line that answers the question,
once, scored at least as the best hit that brought it (the pack's minScore then keeps it)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mdmem.files.supersession import Supersession
from mdmem.search.hybrid import Hit, SearchOutcome
from mdmem.search.neighbors import with_replacements
from mdmem.store import ChunkRow


class NoStore:
    """Every replacement is a hit already: nothing is read."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the store was read ({name})")


def hit(path: str, fact: str, score: float) -> Hit:
    day = path.rsplit("/", 1)[-1]
    chunk = ChunkRow(path, "memory", 1, 3, "h", "h", "", f"# {day}\n\n- {fact}")
    return Hit(chunk, score)


def replaced(old: str, new: str) -> Supersession:
    return Supersession(old, 3, old, 3, new, 3, "2026-10-02")


def order(outcome: SearchOutcome) -> list[tuple[str, float]]:
    return [(h.chunk.path, h.score) for h in outcome.hits]


@pytest.mark.parametrize(
    ("hits", "sups", "expected"),
    [
        (  # the current line ranked last, below minScore: it moves up, scored as the hit that brought it
            [hit("a.md", "Priya lives in Berlin", 0.9), hit("c.md", "Priya is back in Lisbon", 0.1)],
            [replaced("a.md", "c.md")],
            [("c.md", 0.9), ("a.md", 0.9)],
        ),
        (  # two old lines replaced by the same one: it comes once, before the first, with the best score
            [
                hit("a.md", "Priya lives in Berlin", 0.9),
                hit("b.md", "Priya lives in Hamburg", 0.8),
                hit("c.md", "Priya is back in Lisbon", 0.1),
            ],
            [replaced("a.md", "c.md"), replaced("b.md", "c.md")],
            [("c.md", 0.9), ("a.md", 0.9), ("b.md", 0.8)],
        ),
        (  # ranked above the old line already, it keeps its place and its own score
            [hit("c.md", "Priya is back in Lisbon", 0.95), hit("a.md", "Priya lives in Berlin", 0.5)],
            [replaced("a.md", "c.md")],
            [("c.md", 0.95), ("a.md", 0.5)],
        ),
        (  # an old line that does not answer the question brings nothing
            [hit("a.md", "Bob drinks tea", 0.9), hit("c.md", "Bob drinks coffee", 0.1)],
            [replaced("a.md", "c.md")],
            [("a.md", 0.9), ("c.md", 0.1)],
        ),
    ],
)
def test_with_replacements(hits: list[Hit], sups: Sequence[Supersession], expected: list[tuple[str, float]]) -> None:
    outcome = SearchOutcome(hits, "hybrid", supersessions=list(sups))
    assert order(with_replacements(NoStore(), outcome, "where does Priya live")) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # the question names Dmitri Brandt: Dmitri Costa's old job line does not answer it, his chain stays put
        ("Where does Dmitri Brandt work now?", ["old-costa.md", "brandt.md", "new-costa.md"]),
        # about Dmitri Costa: his current line moves up before the old one
        ("Where does Dmitri Costa work now?", ["new-costa.md", "old-costa.md", "brandt.md"]),
        # no name: half the words, and as many as the best line (Brandt's and Costa's old line hold 'works' both)
        ("who works where", ["new-costa.md", "old-costa.md", "brandt.md"]),
    ],
)
def test_an_old_line_answers_only_a_question_about_its_subject(query: str, expected: list[str]) -> None:
    hits = [
        hit("old-costa.md", "Dmitri Costa works at Soylent", 0.9),
        hit("brandt.md", "Dmitri Brandt works at Acme", 0.8),
        hit("new-costa.md", "Dmitri Costa works at Aperture", 0.1),
    ]
    outcome = SearchOutcome(hits, "hybrid", supersessions=[replaced("old-costa.md", "new-costa.md")])
    got = with_replacements(NoStore(), outcome, query)  # type: ignore[arg-type]
    assert [h.chunk.path for h in got.hits] == expected
