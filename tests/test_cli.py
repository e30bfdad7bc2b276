"""The command line: JSON output, exit codes, errors without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mdmem.cli.commands import main
from mdmem.search.results import CITED_RESULT_KEYS
from tests.conftest import REPO, write


@pytest.fixture
def config(workspace: Path, tmp_path: Path) -> Path:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    write(workspace / "memory" / "2026-01-02.md", "# Food\n\n我喜欢吃寿司和拉面，不喜欢香菜。\n")
    cfg = tmp_path / "config.json5"
    ws = json.dumps(str(workspace))
    body = "{ agents: { defaults: { workspace: " + ws + ", memorySearch: { provider: 'none' } } } }"
    cfg.write_text("// test config\n" + body)
    return cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_index_search_get_status_json(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "index", "--config", str(config), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["files"] == 2 and summary["indexed"] == 2 and summary["skipped"] == []
    assert {"chunks", "embedded", "fromCache", "seconds"} <= set(summary)

    code, out, _ = run(capsys, "search", "restic", "--config", str(config), "--json")
    res = json.loads(out)
    assert code == 0 and res["results"][0]["path"] == "MEMORY.md"
    assert all(tuple(r) == CITED_RESULT_KEYS for r in res["results"])  # citations auto: on in main
    assert res["results"][0]["startLine"] == 1 and res["results"][0]["endLine"] == 3

    code, out, _ = run(capsys, "search", "寿司", "--config", str(config), "--json", "--max-results", "1")
    res = json.loads(out)
    assert [r["path"] for r in res["results"]] == ["memory/2026-01-02.md"]

    code, out, _ = run(capsys, "get", "MEMORY.md", "--from", "3", "--lines", "1", "--config", str(config), "--json")
    assert code == 0 and json.loads(out) == {
        "path": "MEMORY.md",
        "text": "Backups run nightly with restic to the NAS vault.",
    }

    code, out, _ = run(capsys, "status", "--config", str(config), "--json")
    status = json.loads(out)
    assert code == 0 and status["files"] == 2 and status["provider"] == "none" and status["staleFiles"] == []
    assert {"workspace", "store", "model", "dims", "chunks", "lastSync", "warnings"} <= set(status)


@pytest.mark.parametrize("path", ["../x.md", "/etc/passwd", "memory/../../x.md"])
def test_get_refusal_exit_code_and_json(config: Path, capsys: pytest.CaptureFixture[str], path: str) -> None:
    code, out, _ = run(capsys, "get", path, "--config", str(config), "--json")
    res = json.loads(out)
    assert code == 1 and res["text"] == "" and res["error"]
    code, out, err = run(capsys, "get", path, "--config", str(config))
    assert code == 1 and out == "" and "error" in err


def test_config_error_exit_2_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.json5"
    cfg.write_text("{ agents: { defaults: { memorySearch: { query: { maxResutls: 5 } } } } }")
    code, out, err = run(capsys, "status", "--config", str(cfg), "--json")
    assert code == 2
    assert "maxResutls" in err and "maxResults" in err
    assert json.loads(out)["error"]


def test_usage_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["search", "x", "--max-results", "zero"])
    assert exc.value.code == 2


def test_python_dash_m_and_no_traceback(config: Path, tmp_path: Path) -> None:
    env = {**os.environ, "MDMEMORY_HOME": str(tmp_path / "home")}
    ok = subprocess.run(
        [sys.executable, "-m", "mdmem", "search", "vault", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["results"][0]["path"] == "MEMORY.md"
    missing = subprocess.run(
        [sys.executable, "-m", "mdmem", "status", "--config", str(tmp_path / "nope.json5")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr and "nope.json5" in missing.stderr


def test_model_pull_uses_the_cache_and_explains_a_miss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_local_provider import make_hf_cache

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path / "models"
    make_hf_cache(cache, tiny_gguf)
    cfg = tmp_path / "pull.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"local": {"modelCacheDir": str(cache)}}}}}))
    uri = "hf:tiny-org/tiny-bert-GGUF/" + tiny_gguf.name
    code, out, _ = run(capsys, "model", "pull", uri, "--config", str(cfg), "--json")
    assert code == 0 and json.loads(out)["path"].endswith(tiny_gguf.name)
    code, out, err = run(capsys, "model", "pull", "hf:nobody/missing/model.gguf", "--config", str(cfg))
    assert code == 1 and "hf:nobody/missing/model.gguf" in err and str(cache) in err


def test_status_reports_an_unavailable_provider_instead_of_failing(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", "# Notes\n\nsomething")
    cfg = tmp_path / "local.json5"
    ms = {"provider": "local", "local": {"modelPath": str(tmp_path / "missing.gguf")}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    code, out, _ = run(capsys, "status", "--config", str(cfg), "--json")
    status = json.loads(out)
    assert code == 0 and status["provider"] == "none" and status["requestedProvider"] == "local"
    assert any("missing.gguf" in w and "provider unavailable" in w for w in status["warnings"])


def test_search_marks_low_confidence_results(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    cfg = tmp_path / "hash.json5"
    cfg.write_text(
        json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": {"provider": "hash"}}}})
    )
    code, out, _ = run(capsys, "search", "restic lisbon", "--config", str(cfg), "--min-score", "0.99")
    assert code == 0
    assert "MEMORY.md:1-3  score" in out and out.count("(low confidence)") == 1
    assert "note: no result reached minScore 0.99" in out
    code, out, _ = run(capsys, "search", "restic vault", "--config", str(cfg), "--min-score", "0.99")
    assert code == 0 and "MEMORY.md:1-3" in out and "low confidence" not in out  # an exact hit is not marked
