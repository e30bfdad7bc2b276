"""Tool definitions for agent runtimes, and the validation of a call's arguments against them.

``tool_definitions(format)`` gives memory_search / memory_get / memory_pack (and, for MCP, memory_truth and
memory_status) as OpenAI, Anthropic or MCP tool objects built from one set of JSON Schemas; the write tool
memory_remember only when asked for by name (``WRITE_TOOLS``: a runtime that offered read tools never offers a
write one unawares). ``validate_arguments`` checks a call's arguments against those schemas
(mdmem.agent.dispatch runs the tools).
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from mdmem.files.memory_get import GET_INPUT
from mdmem.pack.arguments import DEFAULT_PACK_BUDGET, PACK_INPUT, PACK_KINDS
from mdmem.search.arguments import SEARCH_INPUT, check_search_arguments
from mdmem.util.schema import validate_arguments

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_PACK_BUDGET",
    "PACK_KINDS",
    "READ_TOOLS",
    "REMEMBER_INPUT",
    "TOOLS",
    "WRITE_TOOLS",
    "check_search_arguments",
    "tool_definitions",
    "validate_arguments",
]

ToolFormat = Literal["openai", "anthropic", "mcp"]
FORMATS: tuple[ToolFormat, ...] = ("openai", "anthropic", "mcp")
AGENT_TOOLS = ("memory_search", "memory_get", "memory_pack")  # what a model needs; memory_status is for operators
READ_TOOLS = (*AGENT_TOOLS, "memory_truth", "memory_status")
WRITE_TOOLS = ("memory_remember",)  # writes the memory files: offered only when asked for
ALL_TOOLS = (*READ_TOOLS, *WRITE_TOOLS)

SEARCH_DESCRIPTION = (
    "Search your long-term memory: MEMORY.md (curated facts, decisions, preferences) and the daily logs "
    "memory/YYYY-MM-DD.md. Call it before answering anything about earlier conversations, past work, "
    "decisions, dates, people, preferences or to-dos, and before saying you do not know. Each result cites "
    "its source as path with startLine-endLine and has a relevance score (0-1) and a short snippet; cite "
    "path#Lstart-Lend when you use it. Snippets are excerpts: call memory_get with the path and line range "
    "to read the full passage. When no result reaches minScore, the closest few still come back, each marked "
    "lowConfidence: true, with a warning: they may be unrelated, so use one only if its text really answers "
    "the question. No results means nothing stored matched; try other words, names or dates."
)
GET_DESCRIPTION = (
    "Read one of your memory files (MEMORY.md, memory/YYYY-MM-DD.md or another path returned by "
    "memory_search), whole or a range of lines. Use it after memory_search to read around a hit: pass the "
    "result's path, from = startLine and lines = endLine - startLine + 1 (widen the range for more context). "
    "Read only the lines you need to keep your context small. Returns {path, text}; a memory file that does "
    "not exist yet returns empty text, and a path outside the memory files returns an error. A very large file "
    "is cut at maxFileBytes: then truncated is true and note says so."
)
PACK_DESCRIPTION = (
    "Get a compact, cited bundle of your memory about a topic, ready to read: the lines of MEMORY.md and "
    "the daily logs that best match the query, trimmed to the relevant lines and fitted into budgetTokens "
    "(default 1000). Returns bundleText (each excerpt followed by 'Source: path#Lx-Ly') and the items with "
    "their path and line range. Use it instead of several memory_search + memory_get calls when you need "
    "the evidence itself; cite the Source of what you use. An empty bundle means nothing relevant was stored."
)
STATUS_DESCRIPTION = (
    "Report the state of the memory index (read-only): embedding provider and model, search mode, indexed "
    "files and chunks, last sync, files changed since, and warnings."
)

TRUTH_DESCRIPTION = (
    "What is currently true about a person, project or thing in your memory, and what it replaced: the current "
    "line, the earlier versions newest first (each with its date, the day it was superseded and its ref), and "
    "the notes supporting each. Use it before answering 'where does X live now', 'what did X use before', "
    "'when did X change'. Facts are superseded in the memory files, never deleted: a line marked "
    "'(superseded ...)' or struck through is history, not current. Cite the ref of what you use."
)

REMEMBER_DESCRIPTION = (
    "Write one fact, decision, preference or to-do into your long-term memory, as a timestamped line of today's "
    "log memory/YYYY-MM-DD.md (longTerm: true for MEMORY.md, the curated facts). Call it when you are asked to "
    "remember something or learn something worth keeping; one self-contained statement per call, naming who or "
    "what it is about. When it changes a fact already in memory (someone moved, a server was replaced, a "
    "decision reversed), pass supersedes: the ref (path#L<n>) of the old line as memory_search, memory_pack or "
    "memory_truth cite it; the old line is then marked superseded, with a link to the new one, and stays as "
    "history. Do not write a second copy of a fact that did not change, and never store passwords or keys "
    "(they are stored redacted). Returns {path, line, ref}: ref cites the new line."
)

STATUS_INPUT: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
REMEMBER_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1, "description": "the fact to store, one self-contained statement"},
        "longTerm": {"type": "boolean", "description": "true: MEMORY.md; default false: today's log"},
        "supersedes": {
            "type": "string",
            "minLength": 1,
            "description": "the ref (path#L<n>) of the line this fact replaces, e.g. memory/2026-03-01.md#L3",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}
REMEMBER_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "line": {"type": "string"},
        "ref": {"type": "string"},
        "created": {"type": "boolean"},
        "indexed": {"type": "boolean"},
        "supersedes": {"type": "string"},
        "marked": {"type": "boolean"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "error": {"type": "string"},
    },
    "required": ["path", "ref"],
}
TRUTH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subject": {"type": "string", "minLength": 1, "description": "who or what, e.g. 'Priya' or 'the build server'"},
        "maxFacts": {"type": "integer", "minimum": 1, "maximum": 50, "description": "default 5"},
    },
    "required": ["subject"],
    "additionalProperties": False,
}
_VERSION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref": {"type": "string"},
        "text": {"type": "string"},
        "date": {"type": ["string", "null"]},
        "supersededOn": {"type": ["string", "null"]},
        "supportedBy": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["ref", "text", "date"],
}
TRUTH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subject": {"type": "string"},
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "current": {"anyOf": [_VERSION, {"type": "null"}]},
                    "history": {"type": "array", "items": _VERSION},
                },
                "required": ["current", "history"],
            },
        },
        "warnings": {"type": "array", "items": {"type": "string"}},
        "error": {"type": "string"},
    },
    "required": ["facts"],
}

SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "startLine": {"type": "integer"},
                    "endLine": {"type": "integer"},
                    "score": {"type": "number"},
                    "snippet": {"type": "string"},
                    "source": {"type": "string", "enum": ["memory", "extra", "sessions"]},
                    "citation": {"type": "string"},
                    "lowConfidence": {"type": "boolean", "const": True},
                },
                "required": ["path", "startLine", "endLine", "score", "snippet", "source"],
            },
        },
        "provider": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "mode": {"type": "string", "enum": ["hybrid", "vector", "keyword"]},
        "fallback": {"type": "object"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "stale": {"type": "boolean"},
        "disabled": {"type": "boolean"},
        "error": {"type": "string"},
    },
    "required": ["results"],
}
GET_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "text": {"type": "string"},
        "disabled": {"type": "boolean"},
        "error": {"type": "string"},
        "truncated": {"type": "boolean"},
        "note": {"type": "string"},
    },
    "required": ["path", "text"],
}
PACK_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "budgetTokens": {"type": "integer"},
        "usedTokens": {"type": "integer"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "ref": {"type": "string"},
                    "path": {"type": "string"},
                    "startLine": {"type": "integer"},
                    "endLine": {"type": "integer"},
                    "text": {"type": "string"},
                    "score": {"type": "number"},
                    "source": {"type": "string", "enum": ["memory", "extra", "sessions"]},
                    "kind": {"type": "string", "enum": list(PACK_KINDS)},
                    "date": {"type": "string"},
                    "heading": {"type": "string"},
                    "headingLine": {"type": "integer"},
                    "lowConfidence": {"type": "boolean", "const": True},
                },
                "required": ["ref", "path", "startLine", "endLine", "text", "score", "source", "kind"],
            },
        },
        "bundleText": {"type": "string"},
        "matched": {"type": "integer"},
        "bestLeftOut": {
            "type": "object",
            "properties": {"ref": {"type": "string"}, "budgetTokens": {"type": "integer"}},
        },
        "provider": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "mode": {"type": "string", "enum": ["hybrid", "vector", "keyword"]},
        "fallback": {"type": "object"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "stale": {"type": "boolean"},
        "error": {"type": "string"},
    },
    "required": ["items", "bundleText"],
}
STATUS_OUTPUT: dict[str, Any] = {"type": "object"}

TOOLS: dict[str, dict[str, Any]] = {
    "memory_search": {"description": SEARCH_DESCRIPTION, "input": SEARCH_INPUT, "output": SEARCH_OUTPUT},
    "memory_get": {"description": GET_DESCRIPTION, "input": GET_INPUT, "output": GET_OUTPUT},
    "memory_pack": {"description": PACK_DESCRIPTION, "input": PACK_INPUT, "output": PACK_OUTPUT},
    "memory_truth": {"description": TRUTH_DESCRIPTION, "input": TRUTH_INPUT, "output": TRUTH_OUTPUT},
    "memory_status": {"description": STATUS_DESCRIPTION, "input": STATUS_INPUT, "output": STATUS_OUTPUT},
    "memory_remember": {"description": REMEMBER_DESCRIPTION, "input": REMEMBER_INPUT, "output": REMEMBER_OUTPUT},
}
_TITLES = {
    "memory_search": "Search memory",
    "memory_get": "Read memory",
    "memory_pack": "Pack memory context",
    "memory_truth": "Current truth",
    "memory_status": "Memory status",
    "memory_remember": "Remember",
}
_READ_HINTS = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
# appends a line (and marks a superseded one): no destructive update, but a second call writes a second line
_WRITE_HINTS = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False}


def tool_definitions(
    fmt: ToolFormat = "openai", names: tuple[str, ...] | None = None, *, write: bool = False
) -> list[dict[str, Any]]:
    """The tools as ``fmt`` expects them; each call returns fresh objects (safe to modify).

    - ``openai``: Chat Completions ``[{type: "function", function: {name, description, parameters}}]``;
    - ``anthropic``: Messages API ``[{name, description, input_schema}]``;
    - ``mcp``: ``[{name, title, description, inputSchema, outputSchema, annotations}]``.

    ``names`` defaults to memory_search, memory_get and memory_pack, plus memory_truth and memory_status for
    ``mcp``: the read-only tools; ``write`` adds the write tool memory_remember. Any of them by name:
    ``names=("memory_search", "memory_truth")``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool format {fmt!r}; use one of {', '.join(FORMATS)}")
    chosen = names if names is not None else (READ_TOOLS if fmt == "mcp" else AGENT_TOOLS)
    if write:
        chosen = (*chosen, *(n for n in WRITE_TOOLS if n not in chosen))
    unknown = [n for n in chosen if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r}; mdmem provides {', '.join(ALL_TOOLS)}")
    out: list[dict[str, Any]] = []
    for name in chosen:
        spec = TOOLS[name]
        schema = copy.deepcopy(spec["input"])
        if fmt == "openai":
            function = {"name": name, "description": spec["description"], "parameters": schema}
            out.append({"type": "function", "function": function})
        elif fmt == "anthropic":
            out.append({"name": name, "description": spec["description"], "input_schema": schema})
        else:
            hints = _WRITE_HINTS if name in WRITE_TOOLS else _READ_HINTS
            out.append(
                {
                    "name": name,
                    "title": _TITLES[name],
                    "description": spec["description"],
                    "inputSchema": schema,
                    "outputSchema": copy.deepcopy(spec["output"]),
                    "annotations": {"title": _TITLES[name], **hints},
                }
            )
    return out
