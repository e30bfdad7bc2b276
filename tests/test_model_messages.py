"""Errors about a missing or unusable local model give a fix that works for what was configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mdmem.cli.commands import main
from mdmem.config.load import MemorySearchConfig, load_config
from mdmem.providers.factory import build
from mdmem.providers.local import read_gguf_header
from mdmem.util.errors import ProviderError


def settings(tmp_path: Path, model_path: str) -> MemorySearchConfig:
    cfg = tmp_path / "config.json5"
    ms = {"provider": "local", "local": {"modelPath": model_path, "modelCacheDir": str(tmp_path / "cache")}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path), "memorySearch": ms}}}))
    return load_config(cfg).agent().memory_search


def test_a_missing_model_file_path_is_not_told_to_pull(tmp_path: Path) -> None:
    missing = tmp_path / "models" / "minilm.gguf"
    with pytest.raises(ProviderError) as info:
        build("local", settings(tmp_path, str(missing)), tmp_path, {})
    message = str(info.value)
    assert str(missing) in message and "does not exist" in message and "check the path" in message
    assert "memorySearch.local.modelPath" in message and "`mdmem model convert SRC OUT`" in message
    assert "model pull" not in message  # pull only fetches hf: URIs


def test_a_missing_hf_model_is_told_to_pull_that_uri(tmp_path: Path) -> None:
    uri = "hf:someone/some-GGUF/model-q8_0.gguf"
    with pytest.raises(ProviderError) as info:
        build("local", settings(tmp_path, uri), tmp_path, {})
    assert f"`mdmem model pull {uri}`" in str(info.value)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 a zip, not a model", b"GGUF\x01\x00\x00\x00"])
def test_a_file_that_is_not_gguf_names_the_convert_command(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ProviderError) as info:
        read_gguf_header(path)
    message = str(info.value)
    assert "is not a GGUF model file" in message and "memorySearch.local.modelPath" in message
    assert "`mdmem model convert SRC OUT`" in message and "mdmem.providers.bert_to_gguf" not in message


def test_the_cli_shows_the_path_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings(tmp_path, str(tmp_path / "absent.gguf"))
    code = main(["search", "anything", "--config", str(tmp_path / "config.json5")])
    out = capsys.readouterr().out  # search answers from keywords; the note says why and how to fix it
    assert code == 0 and "absent.gguf does not exist: check the path" in out and "model pull" not in out
