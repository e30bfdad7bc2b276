"""One set of search bounds for the tool schema, the Python API and the command line."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.memory import Memory
from mdmem.util.errors import InvalidArgumentError
from tests.conftest import write

BAD = [
    ({"query": ""}, "query must not be empty"),
    ({"query": " \t\n"}, "query must not be empty"),
    ({"query": 5}, "query must be a string"),
    ({"query": "x", "max_results": 0}, "max_results must be from 1 to 100, got 0"),
    ({"query": "x", "max_results": 100_000}, "max_results must be from 1 to 100, got 100000"),
    ({"query": "x", "max_results": True}, "max_results must be an integer"),
    ({"query": "x", "max_results": 2.5}, "max_results must be an integer"),
    ({"query": "x", "min_score": -0.1}, "min_score must be from 0 to 1"),
    ({"query": "x", "min_score": math.nan}, "min_score must be a finite number"),
    ({"query": "x", "min_score": math.inf}, "min_score must be a finite number"),
]
TOOL_NAMES = {"query": "query", "max_results": "maxResults", "min_score": "minScore"}


@pytest.fixture
def mem(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    return make_memory()


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_python_api_rejects_what_the_tool_schema_rejects(mem: Memory, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        mem.search(**kwargs)
    assert isinstance(info.value, ValueError)
    tool_args = {TOOL_NAMES[k]: v for k, v in kwargs.items()}
    result = mem.call_tool("memory_search", tool_args)
    assert result["results"] == [] and "invalid arguments for memory_search" in result["error"]
    assert mem.store.counts()["files"] == 0  # rejected before any sync


def test_valid_bounds_and_integral_floats_are_accepted(mem: Memory) -> None:
    assert mem.search("restic", max_results=100, min_score=0)["results"][0]["path"] == "MEMORY.md"
    assert len(mem.search("restic", max_results=1.0, min_score=1)["results"]) == 1  # type: ignore[arg-type]


def test_huge_hybrid_weights_still_rank(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    """1e308 + 1e308 overflowed the weight normalisation to 0/0: every score was 0."""
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    mem = make_memory({"query": {"minScore": 0, "hybrid": {"vectorWeight": 1e308, "textWeight": 1e308}}})
    hits = mem.search("restic backups")["results"]
    assert hits and hits[0]["score"] > 0.1


def test_the_largest_configured_candidate_pool_does_not_crash_the_vector_search(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    """maxResults 100 x candidateMultiplier 50 asked sqlite-vec for k = 5000 (its limit is 4096)."""
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    mem = make_memory({"query": {"maxResults": 100, "hybrid": {"candidateMultiplier": 50}}})
    assert mem.search("restic backups")["results"][0]["path"] == "MEMORY.md"
