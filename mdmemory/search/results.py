"""The agent tool contract: memory_search / memory_get as JSON-shaped dicts in and out."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from mdmemory.config.load import CitationsMode, MemorySearchConfig
from mdmemory.files.workspace import Workspace
from mdmemory.util.errors import SpecialFileError, WorkspaceError
from mdmemory.util.fileread import read_capped, split_lines

if TYPE_CHECKING:
    from mdmemory.search.hybrid import SearchOutcome

RESULT_KEYS = ("path", "startLine", "endLine", "score", "snippet", "source")
CITED_RESULT_KEYS = (*RESULT_KEYS, "citation")
DEFAULT_MAX_BYTES = MemorySearchConfig.max_file_bytes  # Memory.get passes the configured one


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
    which the caller reports as warnings). Secrets in snippets, paths and citations are ``[REDACTED:<kind>]``
    (mdmemory.util.redaction).
    """
    from mdmemory.files.sessionview import inside_block, is_day_file, prompt_text
    from mdmemory.pack.items import cite  # here, not at the top: memory_get needs neither the search nor the pack
    from mdmemory.search.snippets import SNIPPET_CHARS, make_snippet
    from mdmemory.util.redaction import redact, redact_path

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
        results.append(result)
    return {"results": results, "provider": provider, "model": model, "mode": outcome.mode}


def get_file(
    workspace: Workspace,
    path: str,
    from_line: int | None = None,
    lines: int | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[str, Any]:
    """Read a memory file or a 1-based slice of its lines: ``{path, text}`` or ``{path, text: "", error}``.

    ``path`` may be the one a citation shows, with a secret in it redacted (``memory/deploy-[REDACTED:
    github_token].md``) when that names one file; the answer's ``path`` is always the shown one.
    A memory file that does not exist yet returns empty text, not an error. Only regular files with one
    link are opened (a FIFO, a device, a socket or a hard link is refused without being opened), and at
    most ``max_bytes`` (memorySearch.maxFileBytes) are read: a longer file comes back cut at its last whole
    line with ``truncated: true`` and a ``note`` saying so. A slice (``from_line``/``lines``) counts lines as
    search cites them (mdmemory.util.fileread.split_lines: only ``\\n`` ends a line) and returns them without
    their line endings, joined by ``\\n``.
    """
    from mdmemory.util.redaction import MARKER_PREFIX, redact_path  # here: memory_get of a plain path needs no rules

    shown = redact_path(path) if isinstance(path, str) else repr(path)
    for name, value in (("from", from_line), ("lines", lines)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return {"path": shown, "text": "", "error": f"'{name}' must be a whole number >= 1, got {value!r}"}
    if isinstance(path, str) and MARKER_PREFIX in path:
        path = _unredacted(workspace, path)
    try:
        target = workspace.resolve_for_read(path)
    except WorkspaceError as exc:
        return {"path": shown, "text": "", "error": redact_path(str(exc))}
    rel = redact_path(workspace.rel(target))
    try:
        text, size = read_capped(target, max_bytes, shown=rel)
    except FileNotFoundError:
        return {"path": rel, "text": ""}
    except SpecialFileError as exc:
        return {"path": rel, "text": "", "error": str(exc)}
    except OSError as exc:
        reason = "it is a symlink" if getattr(exc, "errno", None) == errno.ELOOP else exc.strerror or str(exc)
        return {"path": rel, "text": "", "error": f"cannot read {rel}: {reason}"}
    out: dict[str, Any] = {"path": rel, "text": text}
    if from_line is not None or lines is not None:
        all_lines = split_lines(text)  # the lines search cites (mdmemory.index.chunker): only "\n" ends one
        start = (from_line or 1) - 1
        end = len(all_lines) if lines is None else start + lines
        out["text"] = "\n".join(all_lines[start:end])
    if size is not None:
        out["truncated"] = True
        out["note"] = (
            f"{rel} is {size} bytes; memory_get read only its first {max_bytes} bytes (maxFileBytes), "
            f"{text.count(chr(10))} whole lines: later lines cannot be read this way. Raise "
            "agents.defaults.memorySearch.maxFileBytes to read more, or split the file"
        )
    return out


def _unredacted(workspace: Workspace, shown: str) -> str:
    """The memory file a citation names when its path holds a redacted secret (``memory/deploy-[REDACTED:
    github_token].md``, as search, pack and recall show it): the one file whose shown path is ``shown``, so an
    agent can follow the citation; ``shown`` itself when there is no such file or more than one."""
    from mdmemory.util.redaction import redact_path

    wanted = shown.strip().replace("\\", "/")
    found = [f.rel for f in workspace.discover() if redact_path(f.rel) == wanted]
    return found[0] if len(found) == 1 else shown
