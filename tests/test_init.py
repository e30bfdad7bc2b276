"""``mdmem init [DIR]``: a workspace and a commented config, never an overwritten file, the next commands.

Every test runs the real command (``python -m mdmem``) in a real temporary folder and reads what it wrote.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from mdmem.config import load_config
from tests.conftest import MINILM, REPO


def run(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MDMEMORY_DAEMON": "off", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mdmem", *argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )


def snapshot(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for root in roots if root.exists() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_writes_a_workspace_here_and_a_config_in_home(tmp_path: Path, isolated_env: Path) -> None:
    here = tmp_path / "notes"
    here.mkdir()
    done = run(here, "init")
    assert done.returncode == 0, done.stderr
    today = date.today().isoformat()
    assert (here / "MEMORY.md").read_text().startswith("# Long-term memory")
    assert (here / "memory" / f"{today}.md").read_text() == f"# {today}\n\n"
    assert (here / "AGENTS.md").read_text() == (REPO / "workspace-template" / "AGENTS.md").read_text()
    config_file = isolated_env / "config.json5"
    text = config_file.read_text()
    assert text.startswith("// mdmem configuration") and text.count("//") > 5  # commented
    config = load_config(config_file, env={"MDMEMORY_HOME": str(isolated_env)})
    agent = config.agent()
    assert Path(agent.workspace) == here and agent.memory_search.provider == "auto"
    lines = done.stdout.splitlines()
    nxt = lines[lines.index("next:") + 1 :]
    assert [c.strip() for c in nxt] == ["mdmem model pull", "mdmem index", 'mdmem search "what did we decide"']
    for path in (here / "MEMORY.md", config_file):
        assert f"wrote {path}" in done.stdout


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path, isolated_env: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# mine\n")
    before = snapshot(ws, isolated_env)
    done = run(tmp_path, "init", "ws")
    assert done.returncode == 2
    assert f"{ws / 'MEMORY.md'} exists already" in done.stderr and "Fix:" in done.stderr
    assert snapshot(ws, isolated_env) == before  # not even the config or today's log

    other = tmp_path / "other"
    isolated_env.mkdir(parents=True, exist_ok=True)
    (isolated_env / "config.json5").write_text("{}\n")
    done = run(tmp_path, "init", str(other), "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert f"config {isolated_env / 'config.json5'} exists already" in error and "--config" in error
    assert not other.exists() and (isolated_env / "config.json5").read_text() == "{}\n"


def test_init_with_config_elsewhere_prints_commands_that_use_it(tmp_path: Path) -> None:
    done = run(tmp_path, "init", "ws", "--config", "cfg/mine.json5", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    config = tmp_path / "cfg" / "mine.json5"
    assert result["config"] == str(config) and result["workspace"] == str(tmp_path / "ws")
    assert all(f"--config {config}" in c for c in result["next"]) and len(result["next"]) == 3
    assert load_config(config).agent().workspace == tmp_path / "ws"


def test_a_missing_model_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    done = run(tmp_path, "init", "--model", "nowhere.gguf")
    assert done.returncode == 2 and "nowhere.gguf: no such file" in done.stderr and "Fix:" in done.stderr
    assert not (tmp_path / "MEMORY.md").exists()


@pytest.mark.skipif(not MINILM.is_file(), reason=f"{MINILM} is not present")
def test_init_with_a_model_then_index_and_a_hybrid_search(tmp_path: Path, isolated_env: Path) -> None:
    if importlib.util.find_spec("xllamacpp") is None and importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("no llama.cpp binding installed")  # found, not imported: the CLI child loads it
    done = run(tmp_path, "init", "--model", str(MINILM))
    assert done.returncode == 0, done.stderr
    nxt = done.stdout.split("next:\n", 1)[1].split()
    assert nxt[:2] == ["mdmem", "index"] and nxt[-2:] == ["mdmem", "watch"]
    log = next((tmp_path / "memory").glob("*.md"))
    log.write_text(log.read_text() + "- Miso the cat takes her thyroid pills with breakfast.\n")
    indexed = run(tmp_path, "index", "--json")
    assert indexed.returncode == 0, indexed.stderr
    assert json.loads(indexed.stdout)["embedded"] >= 1
    found = run(tmp_path, "search", "--json", "medicine for my pet")
    result = json.loads(found.stdout)
    assert result["mode"] == "hybrid" and result["provider"] == "local"
    assert result["results"][0]["path"] == f"memory/{log.name}"
