"""The command line off the happy path: option placement, argument bounds, JSON key style, terminal safety."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mdmemory.cli import main
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
