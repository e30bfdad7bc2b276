"""``fallback: "none"`` is the absence of a fallback, not a provider that takes over."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

from mdmem.config.load import FallbackName, load_config
from mdmem.memory import Memory
from tests.conftest import REPO, write


def test_nothing_takes_over_and_the_primary_error_is_reported(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic.\n")
    missing = tmp_path / "absent.gguf"
    ms = {"provider": "local", "fallback": "none", "local": {"modelPath": str(missing)}}
    cfg = tmp_path / "config.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    with Memory(load_config(cfg).agent()) as mem:
        # nothing takes over: the primary's error is said, and search answers from keywords meanwhile
        found = mem.search("restic")
        assert found["mode"] == "keyword" and found["results"][0]["path"] == "MEMORY.md"
        assert any("absent.gguf does not exist" in w for w in found["warnings"]) and "fallback" not in found
        report = mem.sync()
        assert any("absent.gguf does not exist" in w for w in report["warnings"])
        status = mem.status()
    assert "fallback" not in status and status["provider"] == "none" and status["requestedProvider"] == "local"
    assert any("absent.gguf" in w for w in status["warnings"])


def test_docs_list_only_real_providers_as_fallbacks() -> None:
    takers = {name for name in get_args(FallbackName) if name != "none"}
    page = " ".join((REPO / "docs" / "providers.md").read_text(encoding="utf-8").split())
    m = re.search(r"\*\*Fallback\.\*\* `fallback: ([^`]*)` names a provider that takes over", page)
    assert m is not None, "the Fallback paragraph of docs/providers.md names the providers that take over"
    assert set(re.findall(r'"(\w+)"', m.group(1))) == takers
    assert '`fallback: "none"` (the default) means no fallback' in page
    example = (REPO / "config.example.json5").read_text(encoding="utf-8")
    comment = example[example.index("// Provider that takes over") : example.index('fallback: "none",')]
    assert '"none" means no fallback' in comment
