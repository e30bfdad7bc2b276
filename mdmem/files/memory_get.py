"""memory_get: a memory file, or a slice of its lines, read within the workspace rules (mdmem.files.workspace)
and the safe reads (mdmem.util.fileread), with secrets in paths shown redacted."""

from __future__ import annotations

import errno
from typing import Any

from mdmem.config.load import MemorySearchConfig
from mdmem.files.workspace import Workspace
from mdmem.util.errors import SpecialFileError, WorkspaceError
from mdmem.util.fileread import read_capped, split_lines

GET_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Workspace-relative memory file, e.g. 'MEMORY.md' or 'memory/2026-03-09.md' "
            "(use a path from memory_search results).",
        },
        "from": {
            "type": "integer",
            "minimum": 1,
            "description": "First line to read, 1-based (e.g. a result's startLine). Default: line 1.",
        },
        "lines": {
            "type": "integer",
            "minimum": 1,
            "description": "How many lines to read from 'from'. Default: to the end of the file.",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}


DEFAULT_MAX_BYTES = MemorySearchConfig.max_file_bytes  # Memory.get passes the configured one


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
    search cites them (mdmem.util.fileread.split_lines: only ``\\n`` ends a line) and returns them without
    their line endings, joined by ``\\n``.
    """
    from mdmem.util.redaction import MARKER_PREFIX, redact_path  # here: memory_get of a plain path needs no rules

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
        all_lines = split_lines(text)  # the lines search cites (mdmem.index.chunker): only "\n" ends one
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
    from mdmem.util.redaction import redact_path

    wanted = shown.strip().replace("\\", "/")
    found = [f.rel for f in workspace.discover() if redact_path(f.rel) == wanted]
    return found[0] if len(found) == 1 else shown
