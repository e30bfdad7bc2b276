"""The command line off the happy path: option placement, argument bounds, JSON key style, terminal safety."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mdmem.cli.commands import main
from tests.conftest import write


@pytest.fixture
def config(workspace: Path, tmp_path: Path) -> Path:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    write(workspace / "memory" / "2026-01-02.md", "# Food\n\nSushi and ramen on Fridays.\n")
    cfg = tmp_path / "config.json5"
    cfg.write_text(
        json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": {"provider": "hash"}}}})
    )
    return cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def keys(value: Any) -> set[str]:
    """Every object key in a JSON value, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(keys(v) for v in value))
    return set()


def test_every_json_output_uses_camel_case_keys(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: set[str] = set()
    for argv in (["index"], ["session-start"], ["search", "restic"], ["status"], ["get", "MEMORY.md"]):
        code, out, _ = run(capsys, *argv, "--config", str(config), "--json")
        assert code == 0
        seen |= keys(json.loads(out))
    assert {"fromCache", "seconds", "startLine", "staleFiles"} <= seen
    assert sorted(k for k in seen if "_" in k) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "status", "--config", "{cfg}"],
        ["--config", "{cfg}", "--json", "status"],
        ["--json", "--config", "{cfg}", "--agent", "main", "status"],
        ["--config", "{cfg}", "search", "restic", "--json"],
        ["--json", "--config", "{cfg}", "model", "pull", "hf:nobody/missing/model.gguf"],
        ["--json", "--config", "{cfg}", "flush", "check", "s1", "--tokens", "1", "--context-window", "200000"],
    ],
)
def test_global_options_work_before_the_command(
    config: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, _ = run(capsys, *[a.replace("{cfg}", str(config)) for a in argv])
    assert code in (0, 1) and isinstance(json.loads(out), dict)  # JSON, so --json and --config were applied


def test_options_after_the_command_win_and_watch_agents_add_up(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--agent", "nope", "--config", str(config), "status")
    assert code == 2 and "unknown agent id 'nope'" in err
    code, _, _ = run(capsys, "--agent", "nope", "--config", str(tmp_path / "absent"), "status", "--config", str(config))
    assert code == 2  # --agent nope still applies
    code, _, _ = run(capsys, "--agent", "nope", "--config", str(tmp_path / "absent"), "status", "--agent", "main")
    assert code == 2  # --config absent still applies
    code, _, _ = run(
        capsys, "--agent", "nope", "--config", "absent", "status", "--agent", "main", "--config", str(config)
    )
    assert code == 0
    code, out, err = run(capsys, "--agent", "nope", "--json", "watch", "--agent", "main", "--config", str(config))
    assert code == 2 and "unknown agent id 'nope'" in err and json.loads(out)["error"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", ""], "QUERY must not be empty"),
        (["search", "   "], "QUERY must not be empty"),
        (["search", "x", "--max-results", "100000"], "--max-results must be from 1 to 100, got 100000"),
        (["search", "x", "--max-results", "0"], "--max-results must be from 1 to 100, got 0"),
        (["search", "x", "--min-score", "1.5"], "--min-score must be from 0 to 1, got 1.5"),
        (["search", "x", "--min-score", "nan"], "--min-score must be a finite number"),
    ],
)
def test_search_arguments_are_usage_errors(
    config: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv, "--config", str(config), "--json")
    assert code == 2 and message in err and message in json.loads(out)["error"]
    assert not (config.parent / "mdmemory-home" / "state").exists()  # nothing opened or indexed


RED = "memory/\x1b[31mred\x1b[0m.md"
FLIPPED = "memory/\u202etxt.exe\u202c.md"
UNSAFE = re.compile("[\x1b\x07\u202e\u202c]|\r(?!\n)")


def test_control_characters_in_names_are_escaped_in_text_but_exact_in_json(
    config: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / RED, "# Colours\n\ncrimson\x1b[2J notes\r\n")
    cfg = str(config)
    outputs = [run(capsys, "index", "--config", cfg), run(capsys, "search", "crimson", "--config", cfg)]
    write(workspace / FLIPPED, "# Later\n\nstale file\n")  # shows up in status as a stale (new) file
    outputs += [
        run(capsys, "status", "--config", cfg),
        run(capsys, "get", "memory/\x1b]0;pwned\x07.txt", "--config", cfg),
        run(capsys, "get", RED, "--config", cfg),
    ]
    for _, out, err in outputs:
        assert not UNSAFE.search(out + err), (out, err)
    assert "1. memory/\\x1b[31mred\\x1b[0m.md:1-3" in outputs[1][1]
    assert "memory/\\u202etxt.exe\\u202c.md" in outputs[2][1]
    assert outputs[3][0] == 1 and "\\x1b]0;pwned\\x07.txt" in outputs[3][2]
    assert outputs[4][1] == "# Colours\n\ncrimson\\x1b[2J notes\r\n\n"  # CRLF line ends are kept

    _, out, _ = run(capsys, "status", "--config", cfg, "--json")
    assert [f["path"] for f in json.loads(out)["staleFiles"]] == [FLIPPED]
    _, out, _ = run(capsys, "search", "crimson", "--config", cfg, "--json")
    assert json.loads(out)["results"][0]["path"] == RED
