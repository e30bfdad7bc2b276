"""The MCP server driven by a real MCP client session over stdio (a spawned server process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.schemas import tool_definitions
from mdmem.search.results import CITED_RESULT_KEYS
from tests.agent_helpers import write_config
from tests.conftest import REPO, write

mcp = pytest.importorskip("mcp", reason="the MCP SDK is the 'mcp' extra: pip install 'mdmem[mcp]'")
anyio = pytest.importorskip("anyio")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

Session = Callable[[ClientSession], Awaitable[None]]
READ = ["memory_search", "memory_get", "memory_pack", "memory_truth", "memory_status"]


@pytest.fixture
def config(tmp_path: Path, workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Long-term memory\n\n## Infra\n\n- Backups run nightly at 02:30 with restic.\n")
    write(workspace / "memory/2026-03-09.md", "# 2026-03-09\n\n- Booked the vet for Pixel on Thursday.\n")
    return write_config(tmp_path / "config.json5", workspace)


def drive(args: list[str], isolated_env: Path, body: Session) -> None:
    """Spawn ``python ARGS`` from the repository and run ``body`` in an initialised client session."""
    env = {"MDMEMORY_HOME": str(isolated_env), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))

    async def main() -> None:
        with anyio.fail_after(60), open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write_stream):
                async with ClientSession(read, write_stream) as session:
                    init = await session.initialize()
                    assert init.server_info.name == "mdmem"
                    await body(session)

    anyio.run(main)


def structured(result: Any) -> dict[str, Any]:
    """The tool result object; the text block carries the same JSON."""
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def test_real_client_lists_and_calls_the_tools(config: Path, isolated_env: Path) -> None:
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        listed = await session.list_tools()
        seen["tools"] = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]
        seen["search"] = await session.call_tool("memory_search", {"query": "when do the backups run"})
        seen["get"] = await session.call_tool("memory_get", {"path": "MEMORY.md", "from": 5, "lines": 1})
        seen["traversal"] = await session.call_tool("memory_get", {"path": "../secrets.md"})
        seen["invalid"] = await session.call_tool("memory_search", {"query": "x", "limit": 3})
        seen["status"] = await session.call_tool("memory_status", {})

    drive(["-m", "mdmem.mcp.server", "--config", str(config)], isolated_env, body)

    tools = {t["name"]: t for t in seen["tools"]}
    assert list(tools) == [*READ, "memory_remember"]
    for expected in tool_definitions("mcp", write=True):
        assert tools[expected["name"]]["inputSchema"] == expected["inputSchema"]
        assert tools[expected["name"]]["description"] == expected["description"]
        assert tools[expected["name"]]["annotations"]["readOnlyHint"] is (expected["name"] != "memory_remember")

    search = structured(seen["search"])
    assert seen["search"].is_error is False
    assert {"results", "provider", "model", "mode"} <= set(search)
    assert (search["provider"], search["mode"]) == ("hash", "hybrid")
    hit = search["results"][0]
    assert tuple(hit) == CITED_RESULT_KEYS
    assert (hit["path"], hit["source"]) == ("MEMORY.md", "memory") and "02:30" in hit["snippet"]
    assert isinstance(hit["startLine"], int) and hit["endLine"] >= hit["startLine"] and 0 < hit["score"] <= 1

    assert structured(seen["get"]) == {"path": "MEMORY.md", "text": "- Backups run nightly at 02:30 with restic."}
    assert seen["get"].is_error is False

    traversal = structured(seen["traversal"])
    assert seen["traversal"].is_error is True
    assert traversal["text"] == "" and "traversal" in traversal["error"]

    invalid = structured(seen["invalid"])
    assert seen["invalid"].is_error is True and invalid["results"] == []
    assert "unknown argument 'limit'" in invalid["error"]

    status = structured(seen["status"])
    assert status["agent"] == "main" and status["files"] == 2  # the search indexed both files


def test_memory_pack_through_a_real_client_in_a_group_session(config: Path, isolated_env: Path) -> None:
    """memory_pack answers with the pack (no trace); a group-session server does not cite search results."""
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["pack"] = await session.call_tool("memory_pack", {"query": "when do the backups run", "budgetTokens": 200})
        seen["tiny"] = await session.call_tool("memory_pack", {"query": "backups", "budgetTokens": 5})
        seen["bad"] = await session.call_tool("memory_pack", {"query": "backups", "budgetTokens": 0})
        seen["search"] = await session.call_tool("memory_search", {"query": "backups"})

    drive(["-m", "mdmem.mcp.server", "--config", str(config), "--kind", "group"], isolated_env, body)
    pack = structured(seen["pack"])
    assert seen["pack"].is_error is False and "trace" not in pack
    assert (pack["query"], pack["budgetTokens"], pack["provider"], pack["mode"]) == (
        "when do the backups run",
        200,
        "hash",
        "hybrid",
    )
    [item] = [i for i in pack["items"] if i["path"] == "MEMORY.md"]
    assert item["text"] == "## Infra\n\n- Backups run nightly at 02:30 with restic."  # the lines 3-5 of the file
    assert (item["ref"], item["kind"], item["startLine"], item["endLine"]) == ("MEMORY.md#L3-L5", "curated", 3, 5)
    assert item["text"] + "\nSource: MEMORY.md#L3-L5" in pack["bundleText"]
    assert 0 < pack["usedTokens"] <= 200
    tiny = structured(seen["tiny"])
    assert seen["tiny"].is_error is True and tiny["items"] == []  # below the header's cost: the minimum named
    assert re.search(r"the pack's header alone takes \d+ tokens .*Fix: ask for at least \d+ tokens", tiny["error"])
    bad = structured(seen["bad"])
    assert seen["bad"].is_error is True and "'budgetTokens' must be from 1 to 100000" in bad["error"]
    search = structured(seen["search"])
    assert search["results"] and all("citation" not in r and "Source:" not in r["snippet"] for r in search["results"])


def test_through_the_command_line_and_without_loading_a_model(
    tmp_path: Path, workspace: Path, isolated_env: Path
) -> None:
    """``mdmem mcp`` with a local model that is missing: initialize, listing and memory_get work, and
    memory_search answers from keywords with a warning naming the model file."""
    write(workspace / "MEMORY.md", "# Long-term memory\n\n- fact\n")
    missing = tmp_path / "no-such-model.gguf"
    cfg = write_config(
        tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "local", "local": {"modelPath": str(missing)}}}
    )
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["names"] = [t.name for t in (await session.list_tools()).tools]
        seen["get"] = await session.call_tool("memory_get", {"path": "MEMORY.md"})
        seen["search"] = await session.call_tool("memory_search", {"query": "fact"})
        seen["after"] = await session.call_tool("memory_get", {"path": "MEMORY.md", "from": 3})

    drive(["-m", "tests.agent_helpers", "mcp", "--config", str(cfg)], isolated_env, body)
    assert seen["names"] == [*READ, "memory_remember"]
    assert structured(seen["get"])["text"] == "# Long-term memory\n\n- fact\n"
    search = structured(seen["search"])  # the model cannot be created: keyword results and a loud warning, no crash
    assert seen["search"].is_error is False and search["mode"] == "keyword" and search["provider"] == "none"
    assert search["results"][0]["path"] == "MEMORY.md"
    assert any(str(missing) in w and "provider unavailable" in w for w in search["warnings"])
    assert structured(seen["after"]) == {"path": "MEMORY.md", "text": "- fact\n"}


def test_remember_with_supersedes_then_truth_over_mdmem_mcp(config: Path, workspace: Path, isolated_env: Path) -> None:
    """``python -m mdmem mcp``: the model searches, writes the changed fact with ``supersedes`` set to the ref it
    found, and memory_truth gives the new line as current with the old one as its history."""
    old = "memory/2026-03-09.md"
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["search"] = await session.call_tool("memory_search", {"query": "vet Pixel Thursday"})
        hit = structured(seen["search"])["results"][0]
        seen["remember"] = await session.call_tool(
            "memory_remember",
            {"text": "Moved the vet for Pixel to Friday", "supersedes": f"{hit['path']}#L{hit['endLine']}"},
        )
        seen["truth"] = await session.call_tool("memory_truth", {"subject": "Pixel vet"})
        seen["again"] = await session.call_tool(
            "memory_remember", {"text": "Moved the vet to Saturday", "supersedes": f"{old}#L3"}
        )
        seen["bad"] = await session.call_tool("memory_remember", {"text": "x", "long_term": True})

    drive(["-m", "mdmem", "mcp", "--config", str(config)], isolated_env, body)
    assert structured(seen["search"])["results"][0]["path"] == old
    remembered = structured(seen["remember"])
    assert seen["remember"].is_error is False, remembered
    new_ref = remembered["ref"]
    assert remembered["supersedes"] == f"{old}#L3" and remembered["marked"] is True
    assert remembered["line"].endswith(f"Moved the vet for Pixel to Friday (supersedes {old}#L3)")
    assert (workspace / old).read_text().splitlines()[2].endswith(f" → {new_ref})")
    [fact] = structured(seen["truth"])["facts"]
    assert fact["current"]["ref"] == new_ref and "Friday" in fact["current"]["text"]
    assert [(v["ref"], v["supersededOn"] is not None) for v in fact["history"]] == [(f"{old}#L3", True)]
    again = structured(seen["again"])
    assert seen["again"].is_error is True and f"already superseded by {new_ref}" in again["error"]
    assert (again["path"], again["ref"]) == ("", "")
    bad = structured(seen["bad"])
    assert seen["bad"].is_error is True and "did you mean 'longTerm'" in bad["error"]


def test_read_only_hides_and_refuses_the_write_tool(config: Path, workspace: Path, isolated_env: Path) -> None:
    seen: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        seen["names"] = [t.name for t in (await session.list_tools()).tools]
        seen["call"] = await session.call_tool("memory_remember", {"text": "Pixel moved to Friday"})

    before = sorted(p.name for p in (workspace / "memory").iterdir())
    drive(["-m", "mdmem", "mcp", "--config", str(config), "--read-only"], isolated_env, body)
    assert seen["names"] == READ
    call = structured(seen["call"])
    assert seen["call"].is_error is True and call["error"].startswith("memory_remember is not offered here")
    assert sorted(p.name for p in (workspace / "memory").iterdir()) == before


def test_importing_and_building_the_server_loads_no_embedding_backend(config: Path) -> None:
    code = (
        "import sys\n"
        "from mdmem.memory import Memory\n"
        "from mdmem.mcp.server import build_server\n"
        f"build_server(Memory.open(config_path={str(config)!r}))\n"
        "print(sorted(m for m in ('llama_cpp', 'openai', 'huggingface_hub') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_bad_config_exits_2_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json5"
    bad.write_text("{ agents: { defaults: { compaction: { reserveTokensFlor: 1 } } } }")
    done = subprocess.run(
        [sys.executable, "-m", "mdmem.mcp.server", "--config", str(bad)], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "did you mean 'reserveTokensFloor'" in done.stderr
