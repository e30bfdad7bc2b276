"""The agent tool contract: memory_search / memory_get as JSON-shaped dicts in and out."""

from __future__ import annotations

from typing import Any

from mdmemory.errors import WorkspaceError
from mdmemory.search import SearchOutcome, make_snippet
from mdmemory.workspace import Workspace, read_text

RESULT_KEYS = ("path", "startLine", "endLine", "score", "snippet", "source")


def search_response(outcome: SearchOutcome, *, provider: str, model: str | None) -> dict[str, Any]:
    """``{results: [{path, startLine, endLine, score, snippet, source[, lowConfidence]}], provider, model, mode}``.

    ``lowConfidence: true`` marks a result returned only because no result reached minScore (the reason is
    in ``outcome.notes``, which the caller reports as warnings).
    """
    results = []
    for h in outcome.hits:
        result: dict[str, Any] = {
            "path": h.chunk.path,
            "startLine": h.chunk.start_line,
            "endLine": h.chunk.end_line,
            "score": round(float(h.score), 4),
            "snippet": make_snippet(h.chunk.text, outcome.terms, h.chunk.heading),
            "source": h.chunk.source,
        }
        if h.low_confidence:
            result["lowConfidence"] = True
        results.append(result)
    return {"results": results, "provider": provider, "model": model, "mode": outcome.mode}


def get_file(workspace: Workspace, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
    """Read a memory file or a 1-based slice of its lines: ``{path, text}`` or ``{path, text: "", error}``.

    A memory file that does not exist yet returns empty text, not an error.
    """
    shown = path if isinstance(path, str) else repr(path)
    for name, value in (("from", from_line), ("lines", lines)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return {"path": shown, "text": "", "error": f"'{name}' must be a whole number >= 1, got {value!r}"}
    try:
        target = workspace.resolve_for_read(path)
    except WorkspaceError as exc:
        return {"path": shown, "text": "", "error": str(exc)}
    rel = workspace.rel(target)
    try:
        text, _, _ = read_text(target)
    except FileNotFoundError:
        return {"path": rel, "text": ""}
    except IsADirectoryError:
        return {"path": rel, "text": "", "error": f"{rel} is a folder, not a memory file"}
    except OSError as exc:
        reason = "it is a symlink" if getattr(exc, "errno", None) == 40 else exc.strerror or str(exc)
        return {"path": rel, "text": "", "error": f"cannot read {rel}: {reason}"}
    if from_line is None and lines is None:
        return {"path": rel, "text": text}
    all_lines = text.split("\n")
    start = (from_line or 1) - 1
    end = len(all_lines) if lines is None else start + lines
    return {"path": rel, "text": "\n".join(all_lines[start:end])}
