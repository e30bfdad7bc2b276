"""A search's arguments: memory_search's input schema and the check every caller runs (mdmem.util.schema)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mdmem.util.errors import InvalidArgumentError
from mdmem.util.schema import validate_arguments

SEARCH_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "description": "What to look for, as a question or keywords: names, dates, topics "
            "(e.g. 'when do the backups run').",
        },
        "maxResults": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "Most results to return (default from the configuration, usually 6).",
        },
        "minScore": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Lowest relevance score for a confident result, 0 to 1 (default usually 0.35). "
            "Exact keyword matches are always kept; when nothing reaches it, the closest few come back marked "
            "lowConfidence.",
        },
        "neighbors": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1,
            "description": "1: also return the notes a result links to or is linked from ([[wikilinks]], "
            "relative Markdown links), each marked via: the result it came through. Default 0.",
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


PYTHON_SEARCH_NAMES = {"query": "query", "maxResults": "max_results", "minScore": "min_score"}


def check_search_arguments(
    query: str, max_results: int | None = None, min_score: float | None = None, names: Mapping[str, str] | None = None
) -> tuple[str, int | None, float | None]:
    """Validate a search the way the memory_search schema does (a non-blank query, 1-100 results, a score
    from 0 to 1); returns them normalised (``5.0`` -> ``5``). Raises InvalidArgumentError naming the
    argument as ``names`` spells it (default: the Python names ``query``, ``max_results``, ``min_score``).
    """
    args: dict[str, Any] = {"query": query}
    if max_results is not None:
        args["maxResults"] = max_results
    if min_score is not None:
        args["minScore"] = min_score
    problem = validate_arguments(SEARCH_INPUT, args, PYTHON_SEARCH_NAMES if names is None else names)
    if problem is not None:
        raise InvalidArgumentError(problem)
    return args["query"], args.get("maxResults"), args.get("minScore")


def check_neighbors(neighbors: object, name: str = "neighbors") -> int:
    """``neighbors`` when it is 0 or 1 (hops of links followed); InvalidArgumentError naming ``name`` else."""
    if isinstance(neighbors, bool) or not isinstance(neighbors, int) or neighbors not in (0, 1):
        raise InvalidArgumentError(f"{name} must be 0 or 1 (links followed from each result), got {neighbors!r}")
    return neighbors
