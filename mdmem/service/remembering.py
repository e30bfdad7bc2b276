"""``POST /remember``, pure: its body checked, and the HTTP status of each refusal (the route is in app.py).

The body is ``{"agent_id", "pod"?, "metadata"?, "text", "longTerm"?, "supersedes"?}``: the memory_remember tool's
arguments (mdmem.agent.schemas, one checker) beside the fields every route takes; an optional field may be
``null``. The write is ``Memory.remember`` with secrets redacted, as the tool's. Refusals:

- 400: a field missing, unknown or of the wrong type; empty or over-long text; ``supersedes`` that is no
  ``path#L<n>``, names no memory file of the workspace, or no single fact line (``ConfigError``,
  ``BadReference``);
- 409: the line is already superseded or was changed since it was indexed (``StaleReference``: search again),
  the note would push its file over ``maxFileBytes`` (``FileFull``), or the agent's files are on another host
  (``service.remoteAgents``);

everything else as on the other routes (mdmem.service.app ``_failure``).
"""

from __future__ import annotations

from typing import Any

from mdmem.agent.remember import FileFull
from mdmem.agent.schemas import REMEMBER_INPUT
from mdmem.agent.supersede import BadReference, StaleReference
from mdmem.config.load import AgentConfig
from mdmem.service.edge import HttpError
from mdmem.util.errors import ConfigError, InvalidArgumentError
from mdmem.util.schema import validate_arguments

ROUTE_FIELDS = ("agent_id", "pod", "metadata")  # checked by the route, as on /retain and /forget


def check_remember(body: dict[str, Any]) -> dict[str, Any]:
    """The tool's arguments in ``body`` (``text``, ``longTerm``, ``supersedes``), checked; InvalidArgumentError
    naming the field otherwise."""
    args = {k: v for k, v in body.items() if k not in ROUTE_FIELDS and (v is not None or k == "text")}
    problem = validate_arguments(REMEMBER_INPUT, args)
    if problem is not None:
        raise InvalidArgumentError(problem.replace("argument", "field") + " (JSON body of /remember)")
    return args


def check_files_here(agent: AgentConfig) -> None:
    """409 for an agent served without its files (``service.remoteAgents``): there is no file to write here."""
    if not agent.files_here:
        raise HttpError(
            409,
            f"agent {agent.id!r} is served here without its files (service.remoteAgents): /remember writes its "
            "memory files. Fix: send it to the service on the agent's own host",
        )


def refusal(exc: Exception) -> HttpError | None:
    """The HTTP error for what ``Memory.remember`` raised about the request (None: the route's usual mapping)."""
    if isinstance(exc, StaleReference | FileFull):
        return HttpError(409, str(exc))
    if isinstance(exc, ConfigError | BadReference):
        return HttpError(400, str(exc))
    return None


def notes(result: dict[str, Any]) -> list[str] | None:
    """Telemetry's codes for an answer's warnings (never their text)."""
    codes = []
    if result.get("marked") is False:
        codes.append("old_line_not_marked")
    if any("stored as [REDACTED" in w for w in result.get("warnings", [])):
        codes.append("secrets_redacted")
    return codes or None
