"""Status tells the truth, in text and JSON, and agrees with what a search would do.

Searches and status run against real indexes, a real watch daemon, the fake OpenAI server on 127.0.0.1 and
the CLI as a subprocess; the degraded cases are real configurations (no API key, a missing model file).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.cli.formatting import format_status as _format_status
from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from tests.conftest import write
from tests.fake_openai import FakeOpenAIServer
from tests.fault_helpers import cli, cli_json, write_config, write_notes
from tests.test_daemon import Daemon

MakeMemory = Callable[..., Memory]


def open_memory(config: Path) -> Memory:
    return Memory.open(config_path=config)


# -- an explicitly configured provider that cannot be created ----------------------------------------------


def test_no_api_key_search_answers_by_keywords_and_status_says_so(tmp_path: Path, workspace: Path) -> None:
    pytest.importorskip("openai")
    config = write_config(tmp_path / "cfg.json5", workspace, tmp_path / "state" / "main.sqlite", provider="openai")
    tags = write_notes(workspace, "heron", 3)

    code, report = cli_json(config, "index")  # a fresh index: kept by keywords, and said loudly
    assert code == 0 and report["indexed"] == 3
    assert any("provider unavailable" in w and "OPENAI_API_KEY" in w for w in report["warnings"])
    assert "warning: provider unavailable" in cli(config, "index").stdout

    code, search = cli_json(config, "search", tags[1])
    assert code == 0 and (search["mode"], search["provider"]) == ("keyword", "none")
    assert search["results"][0]["path"].endswith("heron-01.md")
    assert any("provider unavailable" in w and "apiKey" in w for w in search["warnings"])

    code, status = cli_json(config, "status")
    assert code == 0 and (status["mode"], status["provider"], status["requestedProvider"]) == (
        "keyword",
        "none",
        "openai",
    )
    assert [d["reason"] for d in status["degraded"]] == ["provider-unavailable"]
    assert "OPENAI_API_KEY" in status["degraded"][0]["message"] and status["lastError"] is None
    text = cli(config, "status").stdout
    assert "keyword search" in text and "requested openai" in text
    assert text.count("provider unavailable: No API key") == 1 and "degraded    provider unavailable: " in text


def test_missing_model_keeps_the_vector_index_and_searches_by_keywords(tmp_path: Path, workspace: Path) -> None:
    store = tmp_path / "state" / "main.sqlite"
    tags = write_notes(workspace, "heron", 3)
    built = write_config(tmp_path / "hash.json5", workspace, store)
    assert cli(built, "index").returncode == 0  # an index with vectors (of the hash provider)
    missing = tmp_path / "models" / "gone.gguf"
    config = write_config(
        tmp_path / "local.json5", workspace, store, provider="local", local={"modelPath": str(missing)}
    )
    write(workspace / "memory" / "late.md", "a late note about the osprey")

    failed = cli(config, "index")

    assert failed.returncode == 1 and "keeps its hash vectors" in failed.stderr
    code, search = cli_json(config, "search", tags[2])
    assert code == 0 and search["mode"] == "keyword" and search["results"][0]["path"].endswith("heron-02.md")
    code, status = cli_json(config, "status")
    assert code == 0 and status["mode"] == "keyword" and status["vectors"] > 0
    assert status["degraded"][0]["reason"] == "provider-unavailable"
    assert status["lastError"]["kind"] == "provider" and "keeps its hash vectors" in status["lastError"]["error"]
    assert {"path": "memory/late.md", "state": "new"} in status["staleFiles"]
    text = cli(config, "status").stdout
    # (a background worker may record a newer attempt of the same failure between the two calls)
    assert re.search(r"\nlast error  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ProviderError: ", text)
    assert "index       built by hash" in text and "  new       memory/late.md" in text


# -- status mode == search mode ----------------------------------------------------------------------------


def test_status_mode_agrees_with_search_in_every_configuration(
    workspace: Path, make_memory: MakeMemory, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    write_notes(workspace, "heron", 2)
    local_missing = {"modelPath": str(tmp_path / "missing.gguf")}
    cases: list[tuple[str, Memory, list[str]]] = [
        ("hash", make_memory(), []),
        ("none", make_memory(provider="none"), []),
        ("auto without key or model", make_memory(provider="auto"), ["no-provider"]),
        (
            "missing model",
            make_memory(provider="local", memory_search={"local": local_missing}),
            ["provider-unavailable"],
        ),
        (
            "fallback",
            make_memory(
                provider="local",
                memory_search={
                    "local": local_missing,
                    "fallback": "openai",
                    "remote": {"baseUrl": fake_openai.url, "dimensions": 8},
                },
            ),
            ["fallback"],
        ),
    ]
    modes = {}
    for name, mem, degraded in cases:  # they share one index: each sync rebuilds it for its own provider
        mem.sync()
        search = mem.search("heron1x3")
        status = mem.status()
        assert status["mode"] == search["mode"], name
        assert [d["reason"] for d in status["degraded"]] == degraded, name
        assert search["results"], name
        modes[name] = status["mode"]
    assert modes["hash"] == "hybrid" and modes["fallback"] == "hybrid"

    # the index was built with 64 dims; this process's provider makes 32 (without onSearch, so that a search
    # does not start the rebuild that would make the two disagree)
    other = make_memory({"sync": {"onSearch": False}})
    other.engine.providers.adopt(ProviderChoice(HashEmbeddingProvider(dims=32), "hash"))
    search, status = other.search("heron1x3"), other.status()
    assert search["mode"] == status["mode"] == "keyword"
    assert status["degraded"][0]["reason"] == "index-mismatch" and "mdmem index" in status["degraded"][0]["message"]


# -- watcher, last error, degraded: text and JSON ----------------------------------------------------------


def test_status_text_and_json_show_the_watcher_the_last_error_and_the_degraded_mode(
    tmp_path: Path, workspace: Path
) -> None:
    store = tmp_path / "state" / "main.sqlite"
    write_notes(workspace, "heron", 2)
    assert cli(write_config(tmp_path / "hash.json5", workspace, store), "index").returncode == 0
    missing = str(tmp_path / "gone.gguf")
    config = write_config(
        tmp_path / "cfg.json5",
        workspace,
        store,
        provider="local",
        local={"modelPath": missing},
        sync={"watchDebounceMs": 200},
    )
    daemon = Daemon(config)
    try:
        daemon.wait_for(lambda e: e["event"] == "error" and "retryInSeconds" in e)  # its sync cannot embed
        deadline = time.monotonic() + 15
        while not cli_json(config, "status")[1]["watcher"]["running"] and time.monotonic() < deadline:
            time.sleep(0.2)
        code, status = cli_json(config, "status")
        text = cli(config, "status").stdout
    finally:
        assert daemon.stop() == 0
    assert code == 0
    watcher = status["watcher"]
    assert watcher["running"] and watcher["pid"] == daemon.proc.pid and watcher["mode"] == "native"
    assert f"watcher     running · native · pid {daemon.proc.pid} · since 20" in text
    assert status["lastError"]["kind"] == "provider" and missing in status["lastError"]["error"]
    assert re.search(r"\nlast error  20\d\d-\d\d-\d\dT[\d:]+Z ProviderError: ", text) and missing in text
    assert status["degraded"][0]["reason"] == "provider-unavailable" and "degraded    provider unavailable: " in text
    assert (status["storeState"]["state"], status["storeState"]["movedAside"]) == (
        "ok",
        [],
    ) and "store state ok" in text

    assert cli_json(config, "status")[1]["watcher"]["running"] is False  # stopped: not reported as watching
    assert "watcher     not running" in cli(config, "status").stdout


def test_every_field_that_matters_is_in_the_text(workspace: Path, make_memory: MakeMemory) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    mem = make_memory()
    mem.sync()
    write(workspace / "memory" / "new.md", "a new note")
    status = mem.status()
    status["lastError"] = {"at": "2026-05-01T10:00:00Z", "error": "StoreError: no space left", "kind": "full"}
    status["fallback"] = {"from": "openai", "reason": "HTTP 500"}
    status["degraded"] = [{"reason": "fallback", "message": "hash stands in for openai: HTTP 500"}]
    status["pendingEmbeddings"] = 3  # fields other parts add are printed too, one line each
    status["breaker"] = {"state": "open", "until": "2026-05-01T10:05:00Z", "reason": "HTTP 500", "failures": 2}
    text = _format_status(status)
    expected: dict[str, str] = {
        "agent": f"agent       {status['agent']}",
        "workspace": f"workspace   {status['workspace']}",
        "store": f"store       {status['store']}",
        "storeState": "store state ok",
        "provider": "provider    hash (feature-hash-v1, 64 dims) · hybrid search",
        "files": f"indexed     1 files, {status['chunks']} chunks, {status['vectors']} vectors, "
        f"{status['cacheEntries']} cached embeddings",
        "lastSync": f"last sync   {status['lastSync']}",
        "staleFiles": "stale       1 file(s)\n  new       memory/new.md",
        "watcher": "watcher     not running",
        "lastError": "last error  2026-05-01T10:00:00Z StoreError: no space left",
        "degraded": "degraded    hash stands in for openai: HTTP 500",
        "fallback": "fallback    from openai: HTTP 500",
        "pendingEmbeddings": "pending     3",
        "breaker": "breaker     open until 2026-05-01T10:05:00Z: HTTP 500",
    }
    for key, fragment in expected.items():
        assert key in status and fragment in text, (key, text)
