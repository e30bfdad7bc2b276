"""The agent tool contract: memory_search / memory_get as JSON-shaped dicts in and out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdmem.config.load import CitationsMode

if TYPE_CHECKING:
    from mdmem.search.hybrid import SearchOutcome

RESULT_KEYS = ("path", "startLine", "endLine", "score", "snippet", "source")
CITED_RESULT_KEYS = (*RESULT_KEYS, "citation")


def citations_on(mode: CitationsMode, session_kind: str) -> bool:
    """``query.citations``: ``on`` always, ``off`` never, ``auto`` in a ``main`` (private) session only."""
    return mode == "on" or (mode == "auto" and session_kind == "main")


def search_response(
    outcome: SearchOutcome, *, provider: str, model: str | None, citations: bool = False
) -> dict[str, Any]:
    """``{results: [{path, startLine, endLine, score, snippet, source[, citation][, lowConfidence]}], provider,
    model, mode}``.

    With ``citations`` each result also has ``citation`` (``path#Lx-Ly``) and its snippet ends with
    ``Source: path#Lx-Ly`` (the snippet stays within SNIPPET_CHARS, footer included). ``lowConfidence: true``
    marks a result returned only because no result reached minScore (the reason is in ``outcome.notes``,
    which the caller reports as warnings). A result with superseded lines, or lines that supersede others,
    carries ``supersededBy`` / ``supersedes`` / ``superseded`` (mdmem.search.supersession); a neighbour
    (mdmem.search.neighbors) carries ``via``, the citation of the hit it was reached from.
    Secrets in snippets, paths and citations are ``[REDACTED:<kind>]`` (mdmem.util.redaction).
    """
    from mdmem.files.sessionview import inside_block, is_day_file, prompt_text
    from mdmem.search.snippets import SNIPPET_CHARS, make_snippet
    from mdmem.search.supersession import labels
    from mdmem.util.redaction import redact, redact_path

    results = []
    for h in outcome.hits:
        c = h.chunk
        ref = cite(c.path, c.start_line, c.end_line)
        footer = f"\n\nSource: {ref}" if citations else ""
        # redacted before it is cut, so a snippet window never holds the unrecognisable half of a secret
        text, heading = redact(c.text), redact(c.heading) if c.heading else c.heading
        if is_day_file(c.path, c.source):  # retained turns without their ids and markers
            text, heading = prompt_text(text.split("\n"), inside_block(c.text.split("\n"), whole=False)), ""
        snippet = make_snippet(text, outcome.terms, heading, limit=max(SNIPPET_CHARS - len(footer), 100))
        result: dict[str, Any] = {
            "path": redact_path(c.path),
            "startLine": c.start_line,
            "endLine": c.end_line,
            "score": round(float(h.score), 4),
            "snippet": snippet.rstrip() + footer if citations else snippet,
            "source": c.source,
        }
        if citations:
            result["citation"] = ref
        if h.low_confidence:
            result["lowConfidence"] = True
        if outcome.supersessions:
            result.update(labels(c, outcome.supersessions))
        if c.id in outcome.via:
            result["via"] = outcome.via[c.id]
        results.append(result)
    return {"results": results, "provider": provider, "model": model, "mode": outcome.mode}


def cite(path: str, start: int, end: int) -> str:
    """``path#Lx-Ly``, or ``path#Lx`` for one line; a secret in the path shows as its marker (a citation is
    output: bundles, receipts, ``Source:`` lines)."""
    from mdmem.util.redaction import redact_path  # here: importing the search answers needs no rules yet

    path = redact_path(path)
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"
