"""A secret written by hand into the memory files never comes out of memory_search snippets, Memory.pack
(items, headings, bundleText) or the tool dispatcher; memory_get returns the file as it is (README, "Redaction").
Real index (SQLite, FTS5, sqlite-vec), hash provider and keyword-only."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmemory.agent.dispatch import call_tool
from mdmemory.memory import Memory
from tests.conftest import write

KEY = "sk-" + "proj-" + "Qm9vbGVhbjEy" + "X7kPz3rT9wLq2Vn8" + "Hc4Yd6"  # assembled: no key-shaped literal
PAT = "gh" + "p_" + "A1b2C3d4E5f6G7h8" * 2 + "Zz9Q"
PEM_BODY = ["MIIEowIBAAKCAQEA7" + "xYz0" * 11 + "Qw", "Hq8Vb2" * 10 + "Tt9k", "pL4n" * 16]
PEM = "\n".join(["-----BEGIN " + "RSA PRIVATE KEY-----", *PEM_BODY, "-----END " + "RSA PRIVATE KEY-----"])
MEMORY = f"""# Long-term memory

## Deploy credentials {PAT}

- The staging deploy uses the OpenAI key {KEY} for the summariser.
- The deploy robot token is {PAT} and rotates in March.
- Database: postgres://deploy:Hunter2-{"x9Q"}@db.internal:5432/app

## Deploy key

```
{PEM}
```
"""
SECRETS = [KEY, PAT, "Hunter2-x9Q", *PEM_BODY]


def _leaks(value: object) -> list[str]:
    text = json.dumps(value)
    return [s for s in SECRETS if s in text]


@pytest.fixture(params=["hash", "none"])
def mem(request: pytest.FixtureRequest, workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "MEMORY.md", MEMORY)
    write(workspace / "memory/2026-03-09.md", f"# 2026-03-09\n\n- Rotated the staging deploy key {KEY} today.\n")
    return make_memory(provider=request.param)


@pytest.mark.parametrize("query", ["staging deploy key", "deploy robot token", "database postgres", "RSA"])
def test_search_snippets_never_hold_a_secret(mem: Memory, query: str) -> None:
    result = mem.search(query, min_score=0.0)
    assert result["results"], "the query finds the secret-bearing lines"
    assert _leaks(result) == []
    assert any("[REDACTED:" in r["snippet"] for r in result["results"])


def test_pack_items_and_bundle_never_hold_a_secret(mem: Memory, workspace: Path) -> None:
    result = mem.pack("deploy key token database RSA", budget_tokens=2000, trace=True)
    assert result["items"]
    assert _leaks(result) == []
    marks = re.findall(r"\[REDACTED:([a-z_]+)\]", result["bundleText"])
    assert {"openai_key", "github_token"} <= set(marks)
    for item in result["items"]:
        assert f"{item['text']}\nSource: {item['ref']}" in result["bundleText"]


def test_a_range_holding_only_the_middle_of_a_pem_block_loses_it(mem: Memory, workspace: Path) -> None:
    # lines of the key body, without BEGIN or END in range: found in the whole file, so still redacted
    from mdmemory.trim import FileLines

    lines = (workspace / "MEMORY.md").read_text(encoding="utf-8").split("\n")
    f = FileLines(lines)
    n = lines.index(PEM_BODY[1]) + 1
    assert f.redacted_text(n, n) == "[REDACTED:private_key]"
    assert f.redacted_text(1, 1) == "# Long-term memory"


def test_tool_dispatcher_results_never_hold_a_secret(mem: Memory) -> None:
    for name, args in [
        ("memory_search", {"query": "deploy robot token", "minScore": 0}),
        ("memory_pack", {"query": "staging deploy key", "budgetTokens": 800}),
    ]:
        result = call_tool(mem, name, args)
        assert "error" not in result, result
        assert _leaks(result) == []


def test_memory_get_returns_the_file_as_it_is(mem: Memory) -> None:
    # memory_get is how an agent reads (and then edits) its own notes: verbatim, secrets included
    assert mem.get("MEMORY.md")["text"] == MEMORY
