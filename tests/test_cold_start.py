"""Cold start: each CLI command imports only what it runs.

A runtime that shells out per tool call pays every import on every call, so `get`, `status`, `context`,
`remember`, `flush` and a keyword-only `search` or `pack` with nothing to index must not import numpy,
markdown-it, watchdog, tqdm, llama_cpp or openai. Each command runs in a fresh interpreter (a real
subprocess) on a real workspace and index; the interpreter reports which of those it loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "markdown_it", "watchdog", "tqdm", "llama_cpp", "openai")
# Lighter, but still more than some commands need: the index (sqlean), the lock files, the providers.
MODULES = ("sqlean", "filelock", "mdmem.providers.base", "mdmem.store.index", "subprocess")
RUN_AND_REPORT = f"""
import contextlib, io, json, sys
from mdmem.cli import commands as cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = cli.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
heavy, light = {HEAVY!r}, {MODULES!r}
print(json.dumps({{
    "code": code,
    "loaded": sorted(m for m in sys.modules if m in heavy),
    "modules": sorted(m for m in sys.modules if m in light),
    "out": out.getvalue(),
}}))
"""


def _run(config: Path, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_REPORT, "--config", str(config), *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture()
def keyword_config(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "workspace-template", tmp_path / "ws")
    config = {
        "agents": {
            "defaults": {
                "workspace": str(tmp_path / "ws"),
                "memorySearch": {"provider": "none", "store": {"path": str(tmp_path / "index" / "{agentId}.sqlite")}},
            }
        }
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert _run(path, "index")["code"] == 0  # the index exists and is current before the commands run
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("get", "MEMORY.md"),
        ("status",),
        ("context",),
        ("flush", "check", "session-1", "--total-tokens", "1000", "--context-window", "200000"),
        ("search", "backup"),
        ("pack", "backup"),
        ("tools", "--format", "openai"),
        ("remember", "the cold start test ran"),
    ],
    ids=lambda a: a[0] if isinstance(a, tuple) else str(a),
)
def test_a_command_imports_only_what_it_runs(keyword_config: Path, args: tuple[str, ...]) -> None:
    report = _run(keyword_config, *args)
    assert report["code"] == 0
    assert report["loaded"] == [], f"`mdmem {args[0]}` imported {report['loaded']}"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("get", "MEMORY.md"), []),  # reads one file: no index, no locks, no provider
        # nothing to index: the index and the provider, no lock, no worker
        (("search", "backup"), ["mdmem.providers.base", "mdmem.store.index", "sqlean"]),
    ],
    ids=["get", "search"],
)
def test_a_command_loads_no_index_or_lock_it_does_not_use(
    keyword_config: Path, args: tuple[str, ...], expected: list[str]
) -> None:
    report = _run(keyword_config, *args)
    assert report["code"] == 0
    assert report["modules"] == expected


def test_search_after_an_edit_imports_the_chunker_it_needs(keyword_config: Path) -> None:
    """The other side: a search that has a changed file to index does load markdown-it (and finds it)."""
    workspace = json.loads(keyword_config.read_text())["agents"]["defaults"]["workspace"]
    with open(Path(workspace) / "MEMORY.md", "a", encoding="utf-8") as f:
        f.write("\n- The zanzibar cluster moved to the new rack.\n")
    report = _run(keyword_config, "search", "zanzibar")
    assert report["code"] == 0
    assert report["loaded"] == ["markdown_it"]
    found = json.loads(str(report["out"]))["results"]
    assert [r["path"] for r in found] == ["MEMORY.md"] and "zanzibar" in found[0]["snippet"]


def test_the_daemon_client_imports_only_the_standard_library_and_the_protocol() -> None:
    """What `mdmem search` pays when a daemon answers (mdmem.cli.entry): no config, no argparse, no index."""
    probe = "import json, sys, mdmem.cli.entry; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    loaded = set(json.loads(proc.stdout))
    ours = sorted(m for m in loaded if m.startswith("mdmem"))
    assert ours == [
        "mdmem",
        "mdmem.cli",
        "mdmem.cli.entry",
        "mdmem.cli.output",
        "mdmem.config",
        "mdmem.config.paths",
        "mdmem.runtime",
        "mdmem.runtime.ipc_protocol",
        "mdmem.util",
        "mdmem.util.errors",
        "mdmem.util.moved",
    ]
    assert not loaded & {"argparse", "dataclasses", "sqlean", "json5", "filelock", *HEAVY}


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "MEMORY.md", "--from", "3", "--lines", "2"],
        ["--json", "--config", "c.json5", "search", "backup", "--max-results", "3", "--kind", "group"],
        ["--agent=work", "pack", "q", "--budget-tokens", "500", "--source", "daily", "--trace", "--agent", "main"],
        ["flush", "check", "s-1", "--total-tokens", "10", "--context-window", "200000"],
        ["watch", "--agent", "a", "--agent", "b", "--polling"],
        ["model", "convert", "src", "out.gguf", "--type", "q8_0"],
        ["remember", "a note", "--long-term"],
    ],
    ids=lambda argv: next(a for a in argv if not a.startswith("-") and "." not in a),
)
def test_the_one_command_parser_reads_what_the_full_parser_reads(argv: list[str]) -> None:
    """`parse` builds a parser for the command given only (6 ms less per call); it must agree with the full one."""
    from mdmem.cli import commands as cli

    assert vars(cli.parse(argv)) == vars(cli.parse(argv, cli.build_parser()))  # the command functions too


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["get"], 2), (["serch", "x"], 2), (["get", "x", "--bogus"], 2), (["get", "--help"], 0), (["--version"], 0)],
)
def test_what_the_one_command_parser_refuses_the_full_parser_reports(
    argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from mdmem.cli import commands as cli

    with pytest.raises(SystemExit) as exited:
        cli.parse(argv)
    assert exited.value.code == code
    out, err = capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.parse(argv, cli.build_parser())
    assert capsys.readouterr() == (out, err) and (out or err)  # the full parser's own words, printed once
