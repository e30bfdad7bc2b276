"""The tool dispatcher that never raises: ``call_tool(memory, name, arguments)`` validates the arguments
against the tool's JSON Schema (mdmem.agent.schemas) and always returns the tool's result shape; anything
that goes wrong comes back in it as ``error`` so a runtime can hand it to the model as is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mdmem.agent.schemas import ALL_TOOLS, DEFAULT_PACK_BUDGET, TOOLS, validate_arguments
from mdmem.util.errors import MdMemoryError

if TYPE_CHECKING:
    from mdmem.agent.context import SessionKind


class ToolTarget(Protocol):
    """What the tools run on: its search, get, pack, truth, status and remember (a ``Memory``)."""

    def search(
        self,
        query: str,
        max_results: int | None = ...,
        min_score: float | None = ...,
        *,
        session_kind: Any = ...,
        neighbors: int = ...,
        include_archive: bool = ...,
    ) -> dict[str, Any]: ...

    def get(self, path: str, from_line: int | None = ..., lines: int | None = ...) -> dict[str, Any]: ...

    def pack(
        self, query: str, budget_tokens: int = ..., *, neighbors: int = ..., include_archive: bool = ...
    ) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def truth(self, subject: str, max_facts: int = ...) -> dict[str, Any]: ...

    def remember(
        self, text: str, long_term: bool = ..., supersedes: str | None = ..., *, redact_secrets: bool = ...
    ) -> dict[str, Any]: ...


def error_result(name: str, message: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The result shape of tool ``name`` carrying ``error`` (``{error}`` for an unknown tool)."""
    if name == "memory_search":
        return {"results": [], "error": message}
    if name == "memory_get":
        path = (arguments or {}).get("path")
        return {"path": path if isinstance(path, str) else "", "text": "", "error": message}
    if name == "memory_pack":
        return {"items": [], "bundleText": "", "error": message}
    if name == "memory_truth":
        subject = (arguments or {}).get("subject")
        return {"subject": subject if isinstance(subject, str) else "", "facts": [], "error": message}
    if name == "memory_remember":  # nothing was written
        return {"path": "", "ref": "", "error": message}
    return {"error": message}


def call_tool(
    memory: ToolTarget,
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    session_kind: SessionKind = "main",
    tools: Collection[str] | None = None,
) -> dict[str, Any]:
    """Run tool ``name`` with ``arguments`` (a dict, a JSON object string as OpenAI sends it, or None).

    Always returns the tool's result shape: memory_search ``{results, provider, model, mode, ...}``,
    memory_get ``{path, text}``, memory_pack ``{query, budgetTokens, usedTokens, items, bundleText, ...}``,
    memory_truth ``{subject, facts}``, memory_status the status object, memory_remember ``{path, line, ref,
    ...}`` (its text stored with secrets redacted). Invalid arguments, unknown tools and failures return that
    shape with an ``error`` saying what to change (secrets in it redacted); no exception escapes.
    ``session_kind`` is the kind of session the call comes from: ``main`` (private) or ``group``; memory_search
    cites its results per ``query.citations``. ``tools``: the tools the caller offered (default: all); a call of
    another one is refused, so a model cannot write through a tool that was never offered to it.
    """
    offered = ALL_TOOLS if tools is None else tuple(n for n in ALL_TOOLS if n in tools)
    if isinstance(name, str) and name in TOOLS and name not in offered:
        return error_result(name, f"{name} is not offered here (read-only); the tools are {', '.join(offered)}")
    if not isinstance(name, str) or name not in offered:
        return {"error": f"unknown tool {name!r}; mdmem provides {', '.join(offered)}"}
    args, problem = _parse_arguments(arguments)
    if problem is None:
        problem = validate_arguments(TOOLS[name]["input"], args)
    if problem is not None:
        return error_result(name, _redacted(f"invalid arguments for {name}: {problem}"), args)
    try:
        return _RUNNERS[name](memory, args, session_kind)
    except MdMemoryError as exc:
        return error_result(name, _redacted(str(exc)), args)
    except Exception as exc:  # noqa: BLE001 - the contract: errors are results, never exceptions
        return error_result(name, _redacted(f"internal error ({type(exc).__name__}): {exc}"), args)


def _redacted(message: str) -> str:
    """An error as the model sees it: it may quote an argument or a line of a file, never a secret in it."""
    from mdmem.util.redaction import redact  # only for an error: the import costs ~40 ms

    return redact(message)


def _parse_arguments(arguments: Mapping[str, Any] | str | None) -> tuple[dict[str, Any], str | None]:
    if arguments is None:
        return {}, None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return {}, f"arguments are not valid JSON ({exc}); send a JSON object"
    if not isinstance(arguments, Mapping):
        return {}, f"arguments must be a JSON object, got {type(arguments).__name__}"
    return dict(arguments), None


def _search(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    extra: dict[str, Any] = {}  # only what was asked: a ToolTarget of an older shape takes the call as before
    if args.get("neighbors"):
        extra["neighbors"] = args["neighbors"]
    if args.get("includeArchive"):
        extra["include_archive"] = True
    return memory.search(
        args["query"], max_results=args.get("maxResults"), min_score=args.get("minScore"), session_kind=kind, **extra
    )


def _get(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    return memory.get(args["path"], from_line=args.get("from"), lines=args.get("lines"))


def _pack(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    budget = args.get("budgetTokens", DEFAULT_PACK_BUDGET)
    extra: dict[str, Any] = {}
    if args.get("neighbors"):
        extra["neighbors"] = args["neighbors"]
    if args.get("includeArchive"):
        extra["include_archive"] = True
    return memory.pack(args["query"], budget_tokens=budget, **extra)


def _truth(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    return memory.truth(args["subject"], max_facts=args.get("maxFacts", 5))


def _status(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    return memory.status()


def _remember(memory: ToolTarget, args: dict[str, Any], kind: SessionKind) -> dict[str, Any]:
    return memory.remember(
        args["text"], long_term=args.get("longTerm", False), supersedes=args.get("supersedes"), redact_secrets=True
    )


_RUNNERS: dict[str, Callable[[ToolTarget, dict[str, Any], SessionKind], dict[str, Any]]] = {
    "memory_search": _search,
    "memory_get": _get,
    "memory_pack": _pack,
    "memory_truth": _truth,
    "memory_status": _status,
    "memory_remember": _remember,
}
