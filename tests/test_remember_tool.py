"""The memory_remember tool: offered only when asked for, written through ``Memory.remember`` (secrets redacted),
errors as results naming the argument; then memory_truth and memory_search see the chain."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import READ_TOOLS, REMEMBER_INPUT, TOOLS, tool_definitions
from mdmem.memory import Memory
from tests.agent_helpers import run_cli
from tests.conftest import both_backends, write

OLD = "memory/2026-03-01.md"
DAY = "# 2026-03-01\n\n- [09:10] Priya lives in Berlin\n- [09:12] Bob drinks tea\n"
KEY = "sk-proj-" + "Zq8xW3vB7nK2mR5tY9pL4cJ6hF1dS0aG"


def validate(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(instance, schema)


@pytest.fixture
def mem(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / OLD, DAY)
    return make_memory()


def _today(mem: Memory) -> str:
    return f"memory/{datetime.now().astimezone().date().isoformat()}.md"


# -- definitions ---------------------------------------------------------------------------------------------
def test_the_write_tool_is_offered_only_when_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("openai", "anthropic", "mcp"):
        assert "memory_remember" not in json.dumps(tool_definitions(fmt))  # type: ignore[arg-type]
    [remember] = [t for t in tool_definitions("mcp", write=True) if t["name"] == "memory_remember"]
    assert remember["annotations"] == {
        "title": "Remember",
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": False,
    }
    assert remember["inputSchema"] == REMEMBER_INPUT and remember["inputSchema"]["required"] == ["text"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(remember["inputSchema"])
    jsonschema.Draft202012Validator.check_schema(remember["outputSchema"])
    names = [t["function"]["name"] for t in tool_definitions("openai", write=True)]
    assert names == ["memory_search", "memory_get", "memory_pack", "memory_remember"]
    assert run_cli(["tools", "--format", "anthropic"]) == 0
    assert "memory_remember" not in capsys.readouterr().out
    assert run_cli(["tools", "--format", "anthropic", "--write"]) == 0
    assert json.loads(capsys.readouterr().out) == tool_definitions("anthropic", write=True)
    with pytest.raises(ValueError, match="unknown tool 'memory_forget'"):
        tool_definitions("mcp", ("memory_search", "memory_forget"))


def test_the_description_tells_the_model_to_pass_supersedes() -> None:
    text = TOOLS["memory_remember"]["description"]
    for phrase in ("supersedes", "path#L<n>", "memory_search", "memory_truth", "longTerm", "MEMORY.md", "ref"):
        assert phrase in text, phrase


# -- dispatch ------------------------------------------------------------------------------------------------
def test_remember_with_supersedes_then_truth_shows_the_chain(mem: Memory, workspace: Path) -> None:
    mem.sync()
    hit = call_tool(mem, "memory_search", {"query": "where does Priya live", "minScore": 0})["results"][0]
    assert hit["path"] == OLD
    result = call_tool(mem, "memory_remember", {"text": "Priya is back in Lisbon", "supersedes": f"{OLD}#L3"})
    today = _today(mem)
    assert "error" not in result, result
    assert (result["path"], result["ref"], result["supersedes"], result["marked"]) == (
        today,
        f"{today}#L3",
        f"{OLD}#L3",
        True,
    )
    assert result["line"].endswith(f"Priya is back in Lisbon (supersedes {OLD}#L3)")
    validate(result, TOOLS["memory_remember"]["output"])
    assert (workspace / OLD).read_text().splitlines()[2].startswith("- [09:10] Priya lives in Berlin (superseded ")
    truth = call_tool(mem, "memory_truth", {"subject": "Priya"})
    [fact] = truth["facts"]
    assert fact["current"]["ref"] == f"{today}#L3" and "Lisbon" in fact["current"]["text"]
    assert [v["ref"] for v in fact["history"]] == [f"{OLD}#L3"]
    search = call_tool(mem, "memory_search", {"query": "Priya Berlin", "minScore": 0})["results"]
    [old] = [r for r in search if r["path"] == OLD]
    assert old["supersededBy"][0]["by"] == f"{today}#L3"


def test_long_term_goes_to_memory_md(mem: Memory, workspace: Path) -> None:
    result = call_tool(mem, "memory_remember", {"text": "Pixel is a border collie", "longTerm": True})
    assert (result["path"], result["ref"], result["created"]) == ("MEMORY.md", "MEMORY.md#L3", True)
    assert (workspace / "MEMORY.md").read_text().splitlines()[2].endswith("] Pixel is a border collie")


def test_secrets_are_stored_redacted_and_never_come_back(mem: Memory, workspace: Path) -> None:
    result = call_tool(mem, "memory_remember", {"text": f"the deploy key is {KEY}"})
    assert KEY not in json.dumps(result) and "[REDACTED:openai_key]" in result["line"]
    assert "openai_key" in result["warnings"][0]
    assert KEY not in (workspace / result["path"]).read_text()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "missing required argument 'text'"),
        ({"text": "  "}, "'text' must not be empty"),
        ({"text": "x", "long_term": True}, "unknown argument 'long_term' (did you mean 'longTerm'?)"),
        ({"text": "x", "longTerm": "yes"}, "'longTerm' must be a boolean, got \"yes\""),
        ({"text": "x", "supersedes": 3}, "'supersedes' must be a string, got 3"),
        ({"text": "x", "supersedes": OLD}, "supersedes: 'memory/2026-03-01.md' is not a line reference"),
        ({"text": "x", "supersedes": f"{OLD}#L1"}, "holds 0 fact lines"),
        (  # a search result's citation: the error quotes its fact lines, to pick one without another call
            {"text": "x", "supersedes": f"{OLD}#L1-L4"},
            f"holds 2 fact lines ({OLD}#L3: - [09:10] Priya lives in Berlin; {OLD}#L4: - [09:12] Bob drinks tea)",
        ),
        ({"text": "x", "supersedes": "memory/nope.md#L3"}, "does not exist"),
        ({"text": "x", "supersedes": "../outside.md#L1"}, "'..'"),
    ],
)
def test_bad_arguments_are_results_naming_the_argument_and_write_nothing(
    mem: Memory, workspace: Path, arguments: dict[str, Any], says: str
) -> None:
    result = call_tool(mem, "memory_remember", arguments)
    assert set(result) == {"path", "ref", "error"} and (result["path"], result["ref"]) == ("", "")
    assert says in result["error"], result["error"]
    assert [p.name for p in (workspace / "memory").iterdir()] == ["2026-03-01.md"]
    assert (workspace / OLD).read_text() == DAY


def test_a_stale_reference_is_an_error_result_without_the_secret_it_quotes(mem: Memory, workspace: Path) -> None:
    mem.sync()
    write(workspace / OLD, DAY.replace("Priya lives in Berlin", f"Priya's key is {KEY}"))  # a hand edit
    result = call_tool(mem, "memory_remember", {"text": "Priya is back in Lisbon", "supersedes": f"{OLD}#L3"})
    assert "changed since it was indexed" in result["error"] and "Priya lives in Berlin" in result["error"]
    assert KEY not in result["error"] and "[REDACTED:openai_key]" in result["error"]
    first = call_tool(mem, "memory_remember", {"text": "Bob drinks coffee", "supersedes": f"{OLD}#L4"})
    assert first["marked"] is True
    again = call_tool(mem, "memory_remember", {"text": "Bob drinks water", "supersedes": f"{OLD}#L4"})
    assert f"already superseded by {first['ref']}" in again["error"]


@both_backends
def test_a_caller_that_offered_only_the_read_tools_cannot_write(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / OLD, DAY)
    mem = make_memory()
    result = call_tool(mem, "memory_remember", {"text": "Priya is back in Lisbon"}, tools=READ_TOOLS)
    assert result["error"].startswith("memory_remember is not offered here (read-only); the tools are memory_search")
    assert [p.name for p in (workspace / "memory").iterdir()] == ["2026-03-01.md"]
    assert "error" not in call_tool(mem, "memory_search", {"query": "Priya"}, tools=READ_TOOLS)
    refused = mem.call_tool("memory_remember", {"text": "x"}, tools=["memory_search", "memory_get"])
    assert (
        refused["error"] == "memory_remember is not offered here (read-only); the tools are memory_search, memory_get"
    )
    assert [p.name for p in (workspace / "memory").iterdir()] == ["2026-03-01.md"]
