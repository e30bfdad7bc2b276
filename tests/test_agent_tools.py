"""Tool definitions for OpenAI / Anthropic / MCP and the dispatcher that always answers with a result."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import (
    GET_INPUT,
    GET_OUTPUT,
    PACK_INPUT,
    PACK_OUTPUT,
    SEARCH_INPUT,
    SEARCH_OUTPUT,
    tool_definitions,
)
from mdmem.memory import Memory
from mdmem.search.results import CITED_RESULT_KEYS
from mdmem.util.errors import StoreError
from tests.agent_helpers import run_cli
from tests.conftest import write


def validate(instance: Any, schema: dict[str, Any]) -> None:
    """Validate with jsonschema when it is installed (it comes with the mcp extra), else check the keys."""
    try:
        import jsonschema
    except ImportError:
        assert set(schema["required"]) <= set(instance)
        return
    jsonschema.validate(instance, schema)


@pytest.fixture
def mem(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "MEMORY.md", "# Long-term memory\n\n## Infra\n\n- Backups run nightly at 02:30 with restic.\n")
    write(workspace / "memory/2026-03-09.md", "# 2026-03-09\n\n- Booked the vet for Pixel on Thursday.\n")
    return make_memory()


# -- definitions ---------------------------------------------------------------------------------------------


def test_openai_format() -> None:
    tools = tool_definitions("openai")
    assert [t["type"] for t in tools] == ["function"] * 3
    assert [t["function"]["name"] for t in tools] == ["memory_search", "memory_get", "memory_pack"]
    assert tools[0]["function"]["parameters"] == SEARCH_INPUT
    assert tools[1]["function"]["parameters"] == GET_INPUT
    assert tools[2]["function"]["parameters"] == PACK_INPUT


def test_anthropic_format() -> None:
    tools = tool_definitions("anthropic")
    assert [set(t) for t in tools] == [{"name", "description", "input_schema"}] * 3
    assert tools[0]["input_schema"]["required"] == ["query"]
    assert tools[1]["input_schema"]["required"] == ["path"]
    assert tools[2]["input_schema"]["required"] == ["query"]


def test_mcp_format_adds_the_read_only_truth_and_status_tools() -> None:
    tools = tool_definitions("mcp")
    assert [t["name"] for t in tools] == ["memory_search", "memory_get", "memory_pack", "memory_truth", "memory_status"]
    for tool in tools:
        assert tool["annotations"]["readOnlyHint"] is True and tool["inputSchema"]["type"] == "object"
    assert tools[0]["outputSchema"] == SEARCH_OUTPUT and tools[1]["outputSchema"] == GET_OUTPUT
    assert tools[2]["outputSchema"] == PACK_OUTPUT


def test_schemas_are_valid_json_schema_and_closed() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for tool in tool_definitions("mcp"):
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(tool["outputSchema"])
        assert tool["inputSchema"]["additionalProperties"] is False


def test_descriptions_tell_the_model_when_and_how() -> None:
    search, get, pack = (t["function"]["description"] for t in tool_definitions("openai"))
    for phrase in ("budgetTokens", "Source: path#Lx-Ly", "MEMORY.md", "memory_search"):
        assert phrase in pack, phrase
    for phrase in ("before answering", "startLine", "endLine", "memory_get", "MEMORY.md", "memory/YYYY-MM-DD.md"):
        assert phrase in search, phrase
    for phrase in ("memory_search", "from = startLine", "lines"):
        assert phrase in get, phrase


def test_definitions_are_fresh_copies() -> None:
    first = tool_definitions("anthropic")
    first[0]["input_schema"]["properties"].clear()
    assert tool_definitions("anthropic")[0]["input_schema"]["properties"]
    assert SEARCH_INPUT["properties"]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="openai, anthropic, mcp"):
        tool_definitions("gemini")  # type: ignore[arg-type]


def test_cli_tools_prints_the_plain_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["tools", "--format", "anthropic"]) == 0
    assert json.loads(capsys.readouterr().out) == tool_definitions("anthropic")
    assert run_cli(["tools", "--format", "mcp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"format": "mcp", "tools": tool_definitions("mcp")}
    assert run_cli(["tools"]) == 0
    assert json.loads(capsys.readouterr().out) == tool_definitions("openai")


# -- dispatch ------------------------------------------------------------------------------------------------


def test_search_returns_the_documented_shape(mem: Memory) -> None:
    result = call_tool(mem, "memory_search", {"query": "when do the backups run", "maxResults": 3})
    validate(result, SEARCH_OUTPUT)
    assert "error" not in result and result["provider"] == "hash" and result["mode"] == "hybrid"
    hit = result["results"][0]
    assert tuple(hit) == CITED_RESULT_KEYS and hit["path"] == "MEMORY.md" and "02:30" in hit["snippet"]
    assert len(result["results"]) <= 3


def test_arguments_may_be_a_json_string_as_openai_sends_them(mem: Memory) -> None:
    as_string = call_tool(mem, "memory_search", '{"query": "vet Pixel", "minScore": 0}')
    assert as_string == call_tool(mem, "memory_search", {"query": "vet Pixel", "minScore": 0})
    assert as_string["results"][0]["path"] == "memory/2026-03-09.md"


def test_get_returns_the_documented_shape(mem: Memory) -> None:
    result = call_tool(mem, "memory_get", {"path": "MEMORY.md", "from": 5, "lines": 1.0})
    assert result == {"path": "MEMORY.md", "text": "- Backups run nightly at 02:30 with restic."}
    validate(result, GET_OUTPUT)


def test_status_tool(mem: Memory) -> None:
    result = call_tool(mem, "memory_status", None)
    assert result["agent"] == "main" and "error" not in result


@pytest.mark.parametrize(
    "name, arguments, message",
    [
        ("memory_search", {}, "missing required argument 'query'"),
        ("memory_search", {"query": "  "}, "'query' must not be empty"),
        ("memory_search", {"query": 5}, "'query' must be a string, got 5"),
        (
            "memory_search",
            {"query": "x", "max_results": 3},
            "unknown argument 'max_results' (did you mean 'maxResults'?)",
        ),
        ("memory_search", {"query": "x", "maxResults": 0}, "'maxResults' must be from 1 to 100, got 0"),
        ("memory_search", {"query": "x", "maxResults": True}, "'maxResults' must be an integer, got true"),
        ("memory_search", {"query": "x", "minScore": 1.5}, "'minScore' must be from 0 to 1, got 1.5"),
        ("memory_search", '{"query": ', "arguments are not valid JSON"),
        ("memory_search", "[1, 2]", "arguments must be a JSON object, got list"),
        ("memory_get", {}, "missing required argument 'path'"),
        ("memory_get", {"path": "MEMORY.md", "from": 0}, "'from' must be at least 1, got 0"),
        ("memory_get", {"path": "MEMORY.md", "lines": 2.5}, "'lines' must be an integer, got 2.5"),
        ("memory_status", {"verbose": True}, "unknown argument 'verbose'; valid arguments: none"),
    ],
)
def test_invalid_arguments_come_back_as_results(mem: Memory, name: str, arguments: Any, message: str) -> None:
    result = call_tool(mem, name, arguments)
    assert message in result["error"] and result["error"].startswith(f"invalid arguments for {name}: ")
    if name == "memory_search":
        assert result["results"] == []
    elif name == "memory_get":
        assert result["text"] == "" and isinstance(result["path"], str)


def test_path_errors_keep_the_get_shape(mem: Memory) -> None:
    result = call_tool(mem, "memory_get", {"path": "../../etc/passwd"})
    assert result["path"] == "../../etc/passwd" and result["text"] == "" and "traversal" in result["error"]
    validate(result, GET_OUTPUT)


def test_unknown_tool(mem: Memory) -> None:
    assert call_tool(mem, "memory_delete", {}) == {
        "error": "unknown tool 'memory_delete'; mdmem provides memory_search, memory_get, memory_pack, "
        "memory_truth, memory_status, memory_remember"
    }


def test_a_broken_index_is_an_error_result_not_an_exception(
    workspace: Path, make_memory: Callable[..., Memory], tmp_path: Path
) -> None:
    blocker = write(tmp_path / "blocker", "x")
    mem = make_memory({"store": {"path": str(blocker / "index.sqlite")}})
    with pytest.raises((StoreError, OSError)):  # what the runtime would otherwise have received
        mem.search("anything")
    result = call_tool(mem, "memory_search", {"query": "anything"})
    assert result["results"] == [] and result["error"]
    status = call_tool(mem, "memory_status")  # status still answers, and says what is wrong with the index
    assert "error" not in status and status["storeState"]["state"] == "error" and status["files"] is None
    message = status["storeState"]["message"]
    assert "index.sqlite" in message and "memorySearch.store.path" in message


class _Exploding(Memory):
    def search(self, query: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("disk on fire")


def test_unexpected_exceptions_become_error_results(mem: Memory) -> None:
    broken = _Exploding(mem.agent, mem.config)
    try:
        result = call_tool(broken, "memory_search", {"query": "x"})
    finally:
        broken.close()
    assert result == {"results": [], "error": "internal error (RuntimeError): disk on fire"}
