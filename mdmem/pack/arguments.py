"""A pack's arguments: memory_pack's input schema, the kinds of items a pack can be limited to, and the check
every caller runs (mdmem.util.schema)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mdmem.util.errors import InvalidArgumentError
from mdmem.util.schema import validate_arguments

DEFAULT_PACK_BUDGET = 1000


PACK_KINDS = ("curated", "daily", "extra", "session")  # a pack item's kind (mdmem.pack.build.kind_of)


PACK_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "description": "What the bundle is about, as a question or keywords (e.g. 'what did we decide "
            "about backups').",
        },
        "budgetTokens": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100000,
            "description": "Most tokens the bundle may take (default 1000). A budget below the cost of the "
            "bundle's header (about 26 tokens) is refused with the minimum.",
        },
        "neighbors": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1,
            "description": "1: also consider the notes the matches link to or are linked from, within the budget; "
            "each such item is marked via: the match it came through. Default 0.",
        },
        "includeArchive": {
            "type": "boolean",
            "description": "true: also look in archived memory (memory/archive/, old logs the lifecycle moved "
            "there). Default false.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


SOURCE_KINDS = PACK_KINDS


# The memory_pack tool's arguments plus the Python/CLI-only ones, checked by the tool dispatcher's validator.
PACK_ARGUMENTS: dict[str, Any] = {
    **PACK_INPUT,
    "properties": {**PACK_INPUT["properties"], "maxItems": {"type": "integer", "minimum": 1}},
}


PYTHON_PACK_NAMES = {"query": "query", "budgetTokens": "budget_tokens", "maxItems": "max_items"}


def check_pack_arguments(
    query: Any,
    budget_tokens: Any,
    max_items: Any = None,
    sources: Any = None,
    names: Mapping[str, str] | None = None,
) -> tuple[str, int, int | None, tuple[str, ...] | None]:
    """Validate a pack as memory_pack's schema does (a non-blank query, a budget of 1 to 100,000 tokens,
    ``max_items`` >= 1, known source kinds); returns them normalised. Raises InvalidArgumentError naming the
    argument as ``names`` spells it (default: the Python names)."""
    args: dict[str, Any] = {"query": query, "budgetTokens": budget_tokens}
    if max_items is not None:
        args["maxItems"] = max_items
    problem = validate_arguments(PACK_ARGUMENTS, args, PYTHON_PACK_NAMES if names is None else names)
    if problem is not None:
        raise InvalidArgumentError(problem)
    kinds: tuple[str, ...] | None = None
    if sources is not None:
        name = (names or {}).get("sources", "sources")
        if isinstance(sources, str) or not all(isinstance(k, str) for k in sources):
            raise InvalidArgumentError(f"{name} must be a list of kinds ({', '.join(SOURCE_KINDS)}), got {sources!r}")
        unknown = [k for k in sources if k not in SOURCE_KINDS]
        if unknown:
            raise InvalidArgumentError(f"{name}: unknown kind {unknown[0]!r}; use some of {', '.join(SOURCE_KINDS)}")
        kinds = tuple(sources)
    return args["query"], args["budgetTokens"], args.get("maxItems"), kinds
