"""Memory.pack, mdmem pack and memory_pack over real indexes (SQLite, FTS5, sqlite-vec, the hash provider):
exact line ranges, the budget over random workspaces, the trace, keyword-only mode, sources, stale files,
and memory_search citations (on / off / auto by session kind, OpenClaw's memory.citations)."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import PACK_OUTPUT
from mdmem.config.load import load_config
from mdmem.engine.packing import candidate_count
from mdmem.memory import Memory
from mdmem.pack.build import min_budget
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from mdmem.util.errors import ConfigError, InvalidArgumentError
from mdmem.util.tokens import estimate_tokens
from tests.agent_helpers import run_cli, write_config
from tests.conftest import both_backends, write

MEMORY = """# Long-term memory

## Infra

- Backups run nightly at 02:30 with restic.
- The NAS is called vault and lives in the closet.
- Grafana dashboards are on port 3000.

## People

- Dana prefers oat milk.
- Mika's birthday is on 14 June.
"""
DAY = """# 2026-03-09

## Morning

- Coffee with Mika at the station.
- Restic backup failed at 02:30: disk full on vault.
- Cleared old snapshots on vault; backups ok again.
- Lunch was ramen with Dana.

## Evening

- Watched a film about submarines.
"""


@pytest.fixture
def mem(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "MEMORY.md", MEMORY)
    write(workspace / "memory/2026-03-09.md", DAY)
    write(workspace / "notes/2026-03-10.md", "# Notes\n\n- The restic repository password is in the safe.\n")
    return make_memory({"extraPaths": ["notes"]})


def file_lines(root: Path, path: str, start: int, end: int) -> str:
    return "\n".join((root / path).read_text(encoding="utf-8").split("\n")[start - 1 : end])


def is_file_text(text: str, root: Path, path: str, start: int, end: int) -> bool:
    """An item's text is lines start..end of the file, except where a secret became ``[REDACTED:<kind>]``."""
    parts = re.split(r"\[REDACTED:[a-z_]+\]", text)
    shape = "(?:.+?)".join(re.escape(p) for p in parts)
    return re.fullmatch(shape, file_lines(root, path, start, end), re.DOTALL) is not None


@both_backends
def test_items_are_exact_file_lines_with_citations(mem: Memory, workspace: Path) -> None:
    result = mem.pack("restic backup vault", budget_tokens=400)
    assert set(result) >= {"query", "budgetTokens", "usedTokens", "items", "bundleText", "provider", "model", "mode"}
    assert (result["provider"], result["mode"], result["budgetTokens"]) == ("hash", "hybrid", 400)
    assert result["items"] and 0 < result["usedTokens"] <= 400
    kinds = {}
    for item in result["items"]:
        assert is_file_text(item["text"], workspace, item["path"], item["startLine"], item["endLine"])
        assert item["ref"] in (
            f"{item['path']}#L{item['startLine']}-L{item['endLine']}",
            f"{item['path']}#L{item['startLine']}",
        )
        assert f"{item['text']}\nSource: {item['ref']}" in result["bundleText"]
        kinds[item["path"]] = (item["kind"], item["source"], item.get("date"))
    assert kinds["memory/2026-03-09.md"] == ("daily", "memory", "2026-03-09")
    assert kinds["MEMORY.md"] == ("curated", "memory", None)
    extra = mem.pack("restic repository password safe", budget_tokens=400)["items"]
    assert [(i["path"], i["kind"], i["source"], "date" in i) for i in extra if i["kind"] == "extra"] == [
        ("notes/2026-03-10.md", "extra", "extra", False)  # a dated name outside memory/ is not a daily log
    ]
    assert "trace" not in result


@both_backends
def test_the_trace_accounts_for_every_candidate_once_and_holds_no_text(mem: Memory) -> None:
    query = "restic backup vault"
    result = mem.pack(query, budget_tokens=150, trace=True)
    net = candidate_count(mem.settings.query.max_results, 150)
    candidates = mem.search(query, max_results=net, min_score=0.0)["results"]
    trace = result["trace"]
    assert [r["rank"] for r in trace] == list(range(1, len(candidates) + 1))
    for receipt in trace:
        assert set(receipt) <= {"rank", "ref", "vectorScore", "keywordScore", "score", "decision", "reason", "tokens"}
        assert receipt["decision"] in ("included", "excluded")
    included = [r for r in trace if r["decision"] == "included"]
    assert included and len(result["items"]) <= len(included)
    dumped = json.dumps(trace)
    for text in (MEMORY, DAY):
        for line in text.split("\n"):
            if line.startswith("- "):
                assert line[2:14] not in dumped


@both_backends
def test_keyword_only_mode_packs_without_a_threshold(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    write(workspace / "memory/2026-03-09.md", DAY)
    mem = make_memory(provider="none")
    result = mem.pack("submarines film", budget_tokens=300, trace=True)
    assert (result["mode"], result["provider"], result["model"]) == ("keyword", "none", None)
    [item] = result["items"]
    assert "submarines" in item["text"] and item["path"] == "memory/2026-03-09.md"
    assert all(r["reason"] != "below_min_score" and r["vectorScore"] is None for r in result["trace"])
    assert result["warnings"]  # keyword-only search says so, as memory_search does


@both_backends
def test_sources_keep_only_those_kinds(mem: Memory) -> None:
    daily = mem.pack("restic backup vault", budget_tokens=500, sources=["daily"])
    assert daily["items"] and {i["kind"] for i in daily["items"]} == {"daily"}
    with pytest.raises(InvalidArgumentError, match="unknown kind 'dialy'"):
        mem.pack("x", sources=["dialy"])
    with pytest.raises(InvalidArgumentError, match="budget_tokens must be from 1 to 100000"):
        mem.pack("x", budget_tokens=0)
    with pytest.raises(InvalidArgumentError, match="query must not be empty"):
        mem.pack("  ")


@both_backends
def test_a_file_edited_since_indexing_is_never_cited_with_wrong_lines(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    mem = make_memory({"sync": {"onSearch": False}})
    mem.sync()
    write(workspace / "MEMORY.md", "# Moved down\n\n" + MEMORY)
    result = mem.pack("backups restic", budget_tokens=300, trace=True)
    assert result["items"] == [] and {r["reason"] for r in result["trace"]} == {"stale"}
    mem.sync()
    item = mem.pack("backups restic", budget_tokens=300)["items"][0]
    assert item["text"] == file_lines(workspace, "MEMORY.md", item["startLine"], item["endLine"])


def test_memory_pack_tool_and_disabled_memory(mem: Memory, make_memory: Callable[..., Memory]) -> None:
    result = call_tool(mem, "memory_pack", {"query": "restic backup", "budgetTokens": 300})
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(result, PACK_OUTPUT)
    assert "error" not in result and "trace" not in result and result["items"]
    assert call_tool(mem, "memory_pack", {"query": "x", "budget": 3})["error"].startswith(
        "invalid arguments for memory_pack: unknown argument 'budget'"
    )
    off = make_memory({"enabled": False})
    disabled = call_tool(off, "memory_pack", {"query": "restic"})
    assert disabled["items"] == [] and disabled["disabled"] is True and "memorySearch.enabled" in disabled["error"]


def test_cli_pack_text_json_and_bad_arguments(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    cfg = write_config(tmp_path / "c.json5", workspace)
    assert run_cli(["pack", "restic backups", "--config", str(cfg), "--budget-tokens", "200", "--trace"]) == 0
    out = capsys.readouterr().out
    assert "Source: MEMORY.md#L" in out and "/200 tokens" in out and " selected" in out
    assert run_cli(["pack", "restic backups", "--config", str(cfg), "--json", "--max-items", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["items"]) == 1 and "trace" not in result
    assert run_cli(["pack", "x", "--config", str(cfg), "--budget-tokens", "0"]) == 2
    assert "--budget-tokens must be from 1 to 100000, got 0" in capsys.readouterr().err


# -- the budget, over random workspaces -------------------------------------------------------------------------

WORDS = ["backup", "restic", "vault", "Dana", "oat", "milk", "vet", "Pixel", "ramen", "寿司", "the", "02:30", "film"]
LINE = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(lambda w: "- " + " ".join(w)),
    st.sampled_from(["", "## Section", "### Sub", "x" * 700]),
)
FILE = st.lists(LINE, min_size=1, max_size=60).map("\n".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.dictionaries(
        st.sampled_from(["MEMORY.md", "memory/2026-01-01.md", "memory/2026-01-02.md", "memory/a.md"]), FILE, min_size=1
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    budget=st.integers(1, 2500),
    provider=st.sampled_from(["hash", "none"]),
)
def test_property_the_budget_holds_and_items_are_file_lines(
    files: dict[str, str], query: str, budget: int, provider: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        for path, text in files.items():
            write(root / path, text)
        ms: dict[str, Any] = {"provider": provider, "chunking": {"tokens": 80, "overlap": 20, "windowTokens": 24}}
        config = load_config(write_config(Path(tmp) / "c.json5", root, {"memorySearch": ms}))
        choice = ProviderChoice(HashEmbeddingProvider(dims=32), "hash") if provider == "hash" else None
        with Memory(config.agent(), config, choice=choice) as mem:
            count = mem.choice.provider.count_tokens if mem.choice.provider else estimate_tokens
            if budget < min_budget(count):  # below the header's cost: refused, the minimum named
                with pytest.raises(InvalidArgumentError, match=f"at least {min_budget(count)} tokens"):
                    mem.pack(query, budget_tokens=budget, trace=True)
                return
            result = mem.pack(query, budget_tokens=budget, trace=True)
            assert result["usedTokens"] <= budget
            bundle = result["bundleText"]
            assert result["usedTokens"] == (count(bundle) - count("") if bundle else 0)
            for item in result["items"]:
                assert is_file_text(item["text"], root, item["path"], item["startLine"], item["endLine"])
            ranks = [r["rank"] for r in result["trace"]]
            assert ranks == list(range(1, len(ranks) + 1))


# -- memory_search citations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "kind", "cited"),
    [("auto", "main", True), ("auto", "group", False), ("on", "group", True), ("off", "main", False)],
)
def test_search_citations(
    mem: Memory, make_memory: Callable[..., Memory], setting: str, kind: str, cited: bool
) -> None:
    m = make_memory({"extraPaths": ["notes"], "query": {"citations": setting}})
    results = m.search("restic backups", session_kind=kind)["results"]  # type: ignore[arg-type]
    assert results
    for r in results:
        ref = f"{r['path']}#L{r['startLine']}" + (f"-L{r['endLine']}" if r["endLine"] != r["startLine"] else "")
        assert ("citation" in r) is cited and (r["snippet"].endswith(f"\n\nSource: {ref}")) is cited
        if cited:
            assert r["citation"] == ref and len(r["snippet"]) <= 700


def test_openclaw_memory_citations_is_the_default_and_memory_search_wins(tmp_path: Path, workspace: Path) -> None:
    def config(**root: Any) -> Any:
        path = tmp_path / "c.json5"
        path.write_text(json.dumps(root), encoding="utf-8")
        return load_config(path)

    base = {"defaults": {"workspace": str(workspace)}}
    c = config(memory={"backend": "builtin", "citations": "off"}, agents=base)
    assert c.agent().memory_search.query.citations == "off"
    assert c.ignored_keys == ("memory.backend",)
    explicit = {"defaults": {"workspace": str(workspace), "memorySearch": {"query": {"citations": "on"}}}}
    assert config(memory={"citations": "off"}, agents=explicit).agent().memory_search.query.citations == "on"
    with pytest.raises(ConfigError, match=r"memory\.citations: expected one of \"auto\", \"on\", \"off\""):
        config(memory={"citations": "always"}, agents=base)
    with pytest.raises(ConfigError, match="did you mean 'citations'"):
        config(memory={"citation": "on"}, agents=base)
    assert config(memory="qmd", agents=base).ignored_keys == ("memory",)


def test_cli_search_kind_group_drops_citations(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    cfg = write_config(tmp_path / "c.json5", workspace)
    assert run_cli(["search", "restic", "--config", str(cfg), "--json", "--kind", "group"]) == 0
    assert all("citation" not in r for r in json.loads(capsys.readouterr().out)["results"])
    assert run_cli(["search", "restic", "--config", str(cfg), "--json"]) == 0
    assert all(r["citation"].startswith("MEMORY.md#L") for r in json.loads(capsys.readouterr().out)["results"])


def test_a_file_read_by_an_earlier_pack_is_read_again_when_it_changes_or_becomes_a_symlink(
    tmp_path: Path, workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    mem = make_memory({"sync": {"onSearch": False}})
    mem.sync()
    assert mem.pack("backups restic", budget_tokens=300)["items"]
    write(workspace / "MEMORY.md", MEMORY.replace("nightly", "hourly!"))  # same lines, new text
    result = mem.pack("backups restic", budget_tokens=300, trace=True)
    assert result["items"] == [] and {r["reason"] for r in result["trace"]} == {"stale"}
    outside = write(tmp_path / "outside.md", MEMORY)
    (workspace / "MEMORY.md").unlink()
    (workspace / "MEMORY.md").symlink_to(outside)
    result = mem.pack("backups restic", budget_tokens=300, trace=True)
    assert result["items"] == [] and {r["reason"] for r in result["trace"]} == {"stale"}


@both_backends
def test_when_nothing_reaches_min_score_the_closest_come_marked(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "MEMORY.md", MEMORY)
    write(workspace / "memory/2026-03-09.md", DAY)
    mem = make_memory({"query": {"minScore": 0.99}})
    result = mem.pack("restic snapshots zebra", budget_tokens=500)  # "zebra" is nowhere: no exact hit
    assert result["items"] and all(i["lowConfidence"] is True for i in result["items"])
    assert any("no candidate reached minScore 0.99" in w for w in result["warnings"])
    off = make_memory({"query": {"minScore": 0.99, "lowConfidenceResults": 0}})
    assert off.pack("restic snapshots zebra", budget_tokens=500)["items"] == []
