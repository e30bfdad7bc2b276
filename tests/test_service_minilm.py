"""Recall through a real ``mdmem serve`` with the local MiniLM model: a paraphrase finds a retained turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MINILM
from tests.service_bodies import anthropic_entry, recall_body, retain_body
from tests.service_server import Service, write_config


def _llama() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(not MINILM.is_file(), reason=f"{MINILM} is not present"),
    pytest.mark.skipif(not _llama(), reason="llama-cpp-python is not installed (or misses a dependency)"),
]


def test_paraphrase_recall_with_minilm(tmp_path: Path, probe_cache: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text(
        "# Memory\n\n## Travel\n\nThe team offsite is in Porto in May.\n\n## Tools\n\nWe deploy with Ansible.\n"
    )
    local = {"modelPath": str(MINILM), "threads": 2, "modelCacheDir": str(tmp_path / "models")}
    cfg = write_config(tmp_path / "c.json", {"main": ws}, provider="local", memory_search={"local": local})
    svc = Service(cfg, tmp_path / "home", "tok-minilm", tmp_path / "serve.log")
    svc.env["MDMEMORY_PROBE_CACHE"] = str(probe_cache)
    svc.start(timeout=120)
    try:
        entry = anthropic_entry("Any news about my cat?", "Miso the cat is terrified of the vacuum cleaner.", sse=True)
        assert svc.call("POST", "/retain", retain_body("main", entry)).status == 202
        reply = svc.call("POST", "/recall", recall_body("main", "which pet gets scared by household appliances?"))
        assert reply.status == 200
        texts = [str(m["text"]) for m in reply.body["memories"]]
        assert texts and "vacuum cleaner" in texts[0], texts
    finally:
        svc.stop()
