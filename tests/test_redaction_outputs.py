"""A secret written by hand into the memory files never comes out of memory_search snippets, Memory.pack
(items, headings, bundleText) or the tool dispatcher; memory_get returns the file as it is (docs/redaction.md).
Real index (SQLite, FTS5, sqlite-vec), hash provider and keyword-only."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.memory import Memory
from mdmem.util.redaction import redact
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
    from mdmem.pack.trim import FileLines

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


ONE_MARKER = re.compile(r"\[REDACTED(?::[a-z0-9_]+)?\]")  # [REDACTED:<kind>], or [REDACTED] for a named secret
OTHER_MARKERS = re.compile(r"redacted|\*\*\*|<hidden>|<secret>", re.IGNORECASE)


def test_every_output_marks_a_secret_one_way(mem: Memory, tmp_path: Path) -> None:
    """Search, pack, recall, the tools, session context, a retained turn, status, config errors and shown
    store URLs: a secret becomes ``[REDACTED:<kind>]`` (``[REDACTED]`` for a named secret's value), never
    another marker (``<redacted>``, ``***``...)."""
    from mdmem.config.load import load_config
    from mdmem.config.store import shown_url
    from mdmem.files.retained import render_entry
    from mdmem.service.recall import memories_of
    from mdmem.util.errors import ConfigError
    from tests.service_bodies import openai_entry

    config_errors = []
    for bad in (
        {"provider": KEY},
        {"remote": {"apiKey": 7}},
        {"remote": {"headers": {"Authorization": ["Bearer " + PAT]}}},
    ):
        path = tmp_path / f"bad-{len(config_errors)}.json"
        path.write_text(json.dumps({"agents": {"defaults": {"memorySearch": bad}}}))
        with pytest.raises(ConfigError) as err:
            load_config(path, env={"MDMEMORY_HOME": str(tmp_path / "home")})
        config_errors.append(str(err.value))
    outputs: dict[str, object] = {
        "search": mem.search("staging deploy key token database RSA", min_score=0.0, max_results=20),
        "pack": mem.pack("deploy key token database RSA", budget_tokens=4000, trace=True),
        "recall": memories_of(mem.pack("deploy key token", budget_tokens=1500, max_items=8)),
        "tool memory_search": call_tool(mem, "memory_search", {"query": "deploy robot token", "minScore": 0}),
        "tool memory_pack": call_tool(mem, "memory_pack", {"query": "staging deploy key", "budgetTokens": 800}),
        "tool memory_status": call_tool(mem, "memory_status", {}),
        "context": mem.session_context("main", "2026-03-09"),
        "retain -> session file": render_entry(openai_entry(MEMORY, MEMORY), {"timezone": "UTC"})[2],
        "config errors": config_errors,
        "store URL": shown_url("postgres://deploy:Hunter2-x9Q@db.internal:5432/app?password=Hunter2-x9Q"),
    }
    marked = 0
    for name, value in outputs.items():
        text = json.dumps(value, ensure_ascii=False)
        assert _leaks(value) == [], name
        marked += len(ONE_MARKER.findall(text))
        assert not OTHER_MARKERS.findall(ONE_MARKER.sub("", text)), f"{name}: {OTHER_MARKERS.findall(text)[:3]}"
    assert marked >= len(outputs) - 1  # every output that can hold a secret shows its marker (status holds none)


# -- every prompt-bound output, table-driven over a sample of the corpus (tests/redaction_corpus.py) -----------
SAMPLE = [
    "pem block",
    "pem body, two lines",
    "key wrapped over two lines",
    "zero-width space inside a key",
    "base64 of a key",
    "yaml password block",
    "bearer then a newline",
    "basic credentials",
    "stripe live",
    "google api key",
    "gitlab personal",
    "hugging face",
    "PGPASSWORD",
    "glued to [redacted]",
]
SURVIVORS = [
    "3f9a2b1c4d5e6f708192a3b4c5d6e7f809102132",
    "123e4567-e89b-12d3-a456-426614174000",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "AbstractSingletonProxyFactoryBean",
    "antidisestablishmentarianism",
    "https://example.com:8443/path?q=1",
    "978-3-16-148410-0",
]


def _corpus_notes() -> tuple[str, list[str]]:
    from tests.redaction_corpus import SECRETS
    from tests.test_redaction_corpus import secrets_of

    cases = {c.name: c for c in SECRETS}
    parts, secrets = ["# Vault notes", ""], []
    for i, name in enumerate(SAMPLE):
        parts += [f"## Walrus item {i}", "", f"The walrus item {i} credential:", cases[name].text, ""]
        secrets += secrets_of(cases[name])
    return "\n".join(parts), secrets


LOOKS = "# Zebra\n\nZebra look-alikes: " + " ".join(SURVIVORS) + "\n"


def _pieces_left(value: object, secrets: list[str], size: int = 12) -> list[str]:
    text = json.dumps(value, ensure_ascii=False)
    return [s[i : i + size] for s in secrets for i in range(max(1, len(s) - size + 1)) if s[i : i + size] in text]


TOKEN_NAME = "gh" + "p_" + "Zq8Wm3Kx7Lp2Vn9Rt4Bc6Yd1Hf5Js0Ga2" + "E"  # a token in a file name


@pytest.fixture
def corpus_mem(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    notes, _ = _corpus_notes()
    write(workspace / "MEMORY.md", notes)
    write(workspace / f"memory/deploy-{TOKEN_NAME}.md", "# Deploy\n\nThe walrus deploy runs on Fridays.\n")
    write(workspace / "memory/zebra.md", LOOKS)
    write(workspace / "memory/2026-03-09.md", notes + "\n" + LOOKS)
    return make_memory(provider="hash")


def _outputs(mem: Memory, query: str) -> dict[str, object]:
    from mdmem.files.sessionlog import render_entry
    from mdmem.service.contract import BLOCKED_KINDS  # noqa: F401 - the recall module's limits
    from mdmem.service.recall import memories_of
    from tests.service_bodies import openai_entry

    notes, _ = _corpus_notes()
    pack = mem.pack(query, budget_tokens=8000, trace=True)
    return {
        "retain -> session file": render_entry(openai_entry(notes, notes + LOOKS), {"timezone": "UTC"})[2],
        "search": mem.search(query, min_score=0.0, max_results=30),
        "pack": pack,
        "recall": memories_of(mem.pack(query, budget_tokens=1500, max_items=8)),
        "context": mem.session_context("main", "2026-03-09"),
        "tool memory_search": call_tool(mem, "memory_search", {"query": query, "minScore": 0}),
    }


def test_no_output_bound_for_a_prompt_holds_a_piece_of_a_secret(corpus_mem: Memory) -> None:
    _, secrets = _corpus_notes()
    outputs = _outputs(corpus_mem, "walrus item credential")
    for name, value in outputs.items():
        assert not _pieces_left(value, secrets), f"{name}: {_pieces_left(value, secrets)[:3]}"
        assert "walrus" in json.dumps(value).lower(), f"{name} found the notes"
    assert "[REDACTED:private_key]" in outputs["context"]["text"]  # type: ignore[index]


def test_look_alikes_reach_every_output_unchanged(corpus_mem: Memory) -> None:
    outputs = _outputs(corpus_mem, "zebra look-alikes")
    for name, value in outputs.items():
        if name == "recall":
            continue  # recall keeps the top blocks only
        text = json.dumps(value)
        missing = [s for s in SURVIVORS if s not in text]
        assert not missing, f"{name} lost {missing}"


def test_a_token_in_a_file_name_never_shows_and_get_still_reads_the_file(corpus_mem: Memory) -> None:
    shown = "memory/deploy-[REDACTED:github_token].md"
    assert redact(shown) == shown  # redacting what was redacted changes nothing (recall redacts pack text again)
    search = corpus_mem.search("walrus deploy Fridays", min_score=0.0)
    pack = corpus_mem.pack("walrus deploy Fridays", budget_tokens=2000, trace=True)
    from mdmem.service.recall import memories_of

    recall = memories_of(corpus_mem.pack("walrus deploy Fridays", budget_tokens=1500, max_items=8))
    for name, value in {"search": search, "pack": pack, "recall": recall}.items():
        assert TOKEN_NAME not in json.dumps(value) and TOKEN_NAME[4:16] not in json.dumps(value), name
        assert shown in json.dumps(value), name
    hit = next(r for r in search["results"] if r["path"] == shown)
    assert hit["snippet"] and "Fridays" in hit["snippet"]
    assert any(f"Source: {shown}#L" in m["text"] for m in recall)
    assert f"Source: {shown}#L" in pack["bundleText"]
    assert all(TOKEN_NAME not in r["ref"] for r in pack["trace"])
    got = corpus_mem.get(f"memory/deploy-{TOKEN_NAME}.md")  # the caller's own path still reads the file
    assert "Fridays" in got["text"] and "error" not in got and got["path"] == shown
    cited = corpus_mem.get(shown, from_line=3, lines=1)  # and so does the path a citation shows
    assert cited == {"path": shown, "text": "The walrus deploy runs on Fridays."}
    assert corpus_mem.get("memory/[REDACTED:github_token].md")["text"] == ""  # names no file: nothing
