"""An honest pack: "nothing matched" and "the matches did not fit" are told apart (with the budget that holds
the best match), a one-line answer in a bigger chunk is cut to its line when the budget is tight, and a budget
below the header's cost is refused with the minimum named, from Python, the command line and the MCP tool.

Real workspaces, real SQLite indexes; keyword-only (provider none) and the hash provider (hybrid)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import PACK_OUTPUT
from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.pack.build import HEADER, min_budget
from mdmem.util.errors import InvalidArgumentError
from mdmem.util.tokens import estimate_tokens
from tests.agent_helpers import run_cli, write_config
from tests.conftest import write

# One chunk (the file is small): the answer is line 13, alone under its own heading, after a section of
# unrelated lines. A pack for "when is the dentist" should be able to cite line 13 (and its heading) alone.
NOTES = """# Long-term memory

## Garden

- Raised beds: tomatoes, basil and chillies along the south fence.
- The watering schedule is in the shed notebook, next to the seed tray.
- Compost turned every second Sunday; the bin is behind the greenhouse.
- Slug pellets only in April, never near the herbs.
- Rainwater barrel drains into the pond overflow.

## Health

- The dentist appointment is on Tuesday 14 May at 09:15 with Dr Okafor.
"""
ANSWER = 13


def open_memory(tmp_path: Path, workspace: Path, provider: str) -> Memory:
    config = write_config(tmp_path / f"{provider}.json5", workspace, {"memorySearch": {"provider": provider}})
    loaded = load_config(config)
    mem = Memory(loaded.agent(), loaded)
    mem.sync()
    return mem


@pytest.fixture(params=["none", "hash"])
def mem(request: pytest.FixtureRequest, tmp_path: Path, workspace: Path):
    write(workspace / "MEMORY.md", NOTES)
    with open_memory(tmp_path, workspace, request.param) as m:
        assert len(m.store.chunks_of("MEMORY.md")) == 1  # the whole file is one chunk: trimming is the pack's
        yield m


def counter(mem: Memory):
    provider = mem.choice.provider
    return provider.count_tokens if provider is not None else estimate_tokens


def test_nothing_matched_is_not_the_same_as_nothing_fits(mem: Memory, capsys: pytest.CaptureFixture[str]) -> None:
    none = mem.pack("zebra quokka xylophone", budget_tokens=500)
    if not none["items"]:  # keyword mode: no candidate at all (hash vectors may still find something)
        assert none["matched"] == 0 and "bestLeftOut" not in none
    tight = mem.pack("dentist appointment", budget_tokens=min_budget(counter(mem)))
    assert tight["items"] == [] and tight["matched"] >= 1
    best = tight["bestLeftOut"]
    assert best["ref"] == f"MEMORY.md#L11-L{ANSWER}" and best["budgetTokens"] > tight["budgetTokens"]
    assert any(f"needs a budget of {best['budgetTokens']} tokens" in w for w in tight["warnings"])
    pytest.importorskip("jsonschema").validate(tight, PACK_OUTPUT)


def test_the_budget_said_to_hold_the_best_match_holds_it_and_one_less_does_not(mem: Memory) -> None:
    need = mem.pack("dentist appointment", budget_tokens=min_budget(counter(mem)))["bestLeftOut"]["budgetTokens"]
    fits = mem.pack("dentist appointment", budget_tokens=need)
    [item] = fits["items"]
    assert item["ref"] == f"MEMORY.md#L11-L{ANSWER}" and fits["usedTokens"] <= need and "bestLeftOut" not in fits
    assert item["text"].startswith("## Health\n") and "Dr Okafor" in item["text"]
    short = mem.pack("dentist appointment", budget_tokens=need - 1)
    assert short["items"] == [] and short["bestLeftOut"]["budgetTokens"] == need


def test_a_one_line_answer_is_cut_to_its_line_at_every_tight_budget(mem: Memory) -> None:
    """From the smallest budget up: either the answer line is in the pack, or the pack says what budget holds
    it; never an empty pack that claims nothing matched, never a neighbour from the Garden section."""
    count = counter(mem)
    need = None
    for budget in range(min_budget(count), 130, 3):
        result = mem.pack("when is the dentist appointment", budget_tokens=budget)
        assert result["usedTokens"] <= budget
        if result["items"]:
            [item] = result["items"]
            assert item["startLine"] <= ANSWER <= item["endLine"] and item["startLine"] >= 11, item  # not Garden
            need = need or budget
        else:
            assert result["matched"] >= 1 and result["bestLeftOut"]["budgetTokens"] > budget
    assert need is not None and need <= count(HEADER) + 45  # the line, its heading and its citation


def test_a_budget_below_the_header_is_refused_with_the_minimum_everywhere(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", NOTES)
    smallest = min_budget(estimate_tokens)
    assert smallest == estimate_tokens(HEADER + "\n\n") + 1
    with open_memory(tmp_path, workspace, "none") as mem:
        with pytest.raises(InvalidArgumentError) as info:
            mem.pack("dentist", budget_tokens=smallest - 1)
        assert f"at least {smallest} tokens" in str(info.value) and "header alone takes" in str(info.value)
        assert mem.pack("dentist", budget_tokens=smallest)["bestLeftOut"]  # the minimum itself is accepted
        tool = call_tool(mem, "memory_pack", {"query": "dentist", "budgetTokens": 10})
        assert tool["items"] == [] and f"at least {smallest} tokens" in tool["error"]
    cfg = write_config(tmp_path / "cli.json5", workspace, {"memorySearch": {"provider": "none"}})
    assert run_cli(["pack", "dentist", "--config", str(cfg), "--budget-tokens", "10"]) == 2
    err = capsys.readouterr().err
    assert f"at least {smallest} tokens" in err and "Traceback" not in err


def test_the_command_line_says_which_empty_pack_it_is(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", NOTES)
    cfg = str(write_config(tmp_path / "cli.json5", workspace, {"memorySearch": {"provider": "none"}}))
    assert run_cli(["pack", "zebra quokka", "--config", cfg]) == 0
    assert capsys.readouterr().out.startswith("(nothing in memory matched)")
    assert run_cli(["pack", "dentist", "--config", cfg, "--budget-tokens", "30", "--json"]) == 0
    need = json.loads(capsys.readouterr().out)["bestLeftOut"]["budgetTokens"]
    assert run_cli(["pack", "dentist", "--config", cfg, "--budget-tokens", "30"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"(nothing fits in 30 tokens: 1 candidate(s) matched; --budget-tokens {need} holds")
    assert f"MEMORY.md#L11-L{ANSWER}" in out
