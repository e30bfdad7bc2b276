"""The local provider on xllamacpp (prebuilt llama.cpp wheels) against llama-cpp-python, with the real MiniLM.

Both bindings load the same GGUF file: vectors must agree to cosine 0.999, token counts exactly (the chunker
and truncation count with them), long texts are cut at the model's context. A missing llama-cpp-python is
made real by an import blocker on ``sys.meta_path`` in a child process (``find_spec`` and ``import`` both
fail there, as on a machine without the package), never by a mock of what the factory decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from mdmemory.errors import ProviderError
from mdmemory.providers import probe, xllama
from mdmemory.providers.local import LocalEmbeddingProvider
from tests.conftest import MINILM, REPO, write

pytest.importorskip("xllamacpp")
pytestmark = pytest.mark.skipif(not MINILM.is_file(), reason=f"{MINILM} is not present")

TEXTS = {
    "english": [
        "Dana asked us to move the backups to the new NAS before Friday.",
        "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    ],
    "cjk": [
        "今天我们讨论了数据库迁移的计划，决定下周五之前把备份移到新的NAS上。",
        "明日は京都へ行きます。新幹線の切符はもう買いました。",
        "우리는 다음 주에 회의를 열어서 분기 계획을 검토할 것입니다.",
    ],
    "code": [
        "def embed_batch(self, texts):\n    return np.stack([self._embed(t) for t in texts])\n",
        "SELECT chunk_id FROM vec_chunks WHERE embedding MATCH :q AND k = :k;",
    ],
    "emoji": ["🎉🔥 party time 👍🏽", "👨‍👩‍👧‍👦 family trip to the beach 🏖️ was great!!! 😂"],
    "special": ["[CLS] [SEP] [MASK] <s> </s> typed in a note", "naïve café, Привет"],
    "edge": ["", " ", "\u200b", "a"],
    "long": [
        " ".join(f"the meeting on day {i} moved the backups to the NAS" for i in range(120)),
        "记忆系统需要在本地保存笔记并建立索引，以便快速检索。" * 40,
    ],
}
ALL = [t for texts in TEXTS.values() for t in texts]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalEmbeddingProvider, LocalEmbeddingProvider]:
    pytest.importorskip("llama_cpp")
    cache = tmp_path_factory.mktemp("models")
    ref = LocalEmbeddingProvider(str(MINILM), cache, threads=1, binding="llama-cpp-python")
    cand = LocalEmbeddingProvider(str(MINILM), cache, threads=1, binding="xllamacpp")
    yield ref, cand
    ref.close()
    cand.close()


def test_vectors_match_llama_cpp_python_on_varied_text(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    ref, cand = pair
    a, b = ref.embed_documents(ALL), cand.embed_documents(ALL)
    assert a.shape == b.shape == (len(ALL), 384)
    cosines = (a * b).sum(axis=1)
    worst = {
        cat: min(float(c) for c, t in zip(cosines, ALL, strict=True) if t in texts) for cat, texts in TEXTS.items()
    }
    assert min(worst.values()) >= 0.999, worst
    assert (cand.embed_query("when do the backups run") @ ref.embed_query("when do the backups run")) >= 0.999


def test_token_counts_are_identical_one_by_one_and_in_a_batch(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    ref, cand = pair
    expected = [ref.count_tokens(t) for t in ALL]
    assert [cand.count_tokens(t) for t in ALL] == expected
    lines = [line for t in ALL for line in t.split("\n")] + [f"line {i} of a fresh note" for i in range(700)]
    assert cand.count_tokens_batch(lines) == [ref.count_tokens(t) for t in lines]  # over one request's size
    assert expected[ALL.index("")] == 2  # [CLS] [SEP]: the special tokens are counted


def test_truncation_cuts_at_the_context_as_llama_cpp_python_does(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    ref, cand = pair
    for text in TEXTS["long"]:
        assert cand.count_tokens(text) > 512
        cut = cand.truncate(text)
        assert cut == ref.truncate(text) and cand.count_tokens(cut) <= 512 < cand.count_tokens(text[: len(cut) + 1])
    # an over-long input goes through embed_batch too (never to the server whole): the same vector as its cut
    whole, cut = cand.embed_documents([TEXTS["long"][0], cand.truncate(TEXTS["long"][0])])
    assert float(whole @ cut) > 0.99999


def test_the_server_goes_with_close_and_its_socket_folder_too(no_thread_leaks: None) -> None:
    provider = LocalEmbeddingProvider(str(MINILM), MINILM.parent, threads=1, binding="xllamacpp")
    before = len(os.listdir("/proc/self/task"))
    provider.load()
    model = provider._llm
    assert isinstance(model, xllama.XllamaModel)
    folder = Path(model._folder)
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in folder.iterdir()] == ["server.sock"]
    assert len(os.listdir("/proc/self/task")) > before + 1  # the server's HTTP and compute threads
    provider.embed_documents(["hello"])
    provider.close()
    provider.close()  # twice is fine
    assert not folder.exists()
    assert len(os.listdir("/proc/self/task")) <= before + 1  # one idle worker of the thread pool may stay
    with pytest.raises(ProviderError, match="closed"):
        model.token_counts(["a fresh text, never counted"])


def test_a_process_that_never_closes_leaves_no_socket_folder(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from mdmemory.providers.local import LocalEmbeddingProvider\n"
        f"p = LocalEmbeddingProvider({str(MINILM)!r}, {str(tmp_path)!r}, threads=1, binding='xllamacpp')\n"
        "p.embed_documents(['hello'])\n"
        "print(p._llm._folder)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("mdmemory-xllama-") and not folder.exists()


def test_fewer_threads_restart_the_server_and_keep_the_vectors(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    provider = LocalEmbeddingProvider(str(MINILM), MINILM.parent, threads=2, binding="xllamacpp")
    try:
        before = provider.embed_documents(TEXTS["english"])
        provider.limit_threads(1)
        assert provider.threads == 1 and provider._llm.threads == 1
        after = provider.embed_documents(TEXTS["english"])
        assert np.allclose(before, after, atol=1e-3)
        assert provider.count_tokens("after the restart") == pair[0].count_tokens("after the restart")
    finally:
        provider.close()


def test_the_same_model_keeps_its_index_identity_on_either_binding(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    """Vectors within cosine 0.9997 are the same vectors for ranking: switching binding re-embeds nothing."""
    ref, cand = pair
    assert ref.provider_key == cand.provider_key


def test_a_sigill_in_the_xllamacpp_probe_names_the_signal_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "probe"))
    script = tmp_path / "ill.py"
    script.write_text(
        "import json, os, signal\nprint(json.dumps({'variant': 'xllamacpp'}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGILL)\n"
    )
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    stand_in.chmod(0o755)
    with pytest.raises(ProviderError) as caught:
        probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(stand_in))
    message = str(caught.value)
    assert "SIGILL" in message and MINILM.name in message and "Fix:" in message and "llama-cpp-python" in message
    with pytest.raises(ProviderError, match="SIGILL"):  # cached: the crash is not run again
        probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(tmp_path / "missing"))


def test_the_real_xllamacpp_probe_runs_and_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "probe"))
    probe.ensure_runs_xllamacpp(MINILM, 512, 1)
    assert len(list(probe.cache_dir().glob("*.json"))) == 1
    probe.ensure_runs_xllamacpp(MINILM, 512, 1, python=str(tmp_path / "missing"))  # cached: no child


# -- without llama-cpp-python: a child process with an import blocker --------------------------------------
BLOCKER = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Blocker())
from mdmemory.entry import main
code = main(sys.argv[2:])
print(f"MODULES llama_cpp={'llama_cpp' in sys.modules} xllamacpp={'xllamacpp' in sys.modules}", file=sys.stderr)
sys.exit(code)
"""


def cli(blocked: str, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, blocked, *argv], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def minilm_config(tmp_path: Path, workspace: Path) -> dict[str, str]:
    write(workspace / "MEMORY.md", "# Memory\n\n## Backups\nThe NAS copies every folder to the cloud at 2am.\n")
    write(workspace / "memory" / "2026-11-20.md", "# 2026-11-20\n\nMiso the cat takes thyroid pills daily.\n")
    config = tmp_path / "config.json5"
    local = {"modelPath": str(MINILM), "threads": 1}
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {"workspace": str(workspace), "memorySearch": {"provider": "local", "local": local}}
                }
            }
        )
    )
    return {**os.environ, "MDMEMORY_CONFIG": str(config), "MDMEMORY_DAEMON": "off", "PYTHONPATH": str(REPO)}


def test_without_llama_cpp_python_the_cli_indexes_and_searches_with_xllamacpp(minilm_config: dict[str, str]) -> None:
    index = cli("llama_cpp", "index", "--json", env=minilm_config)
    assert index.returncode == 0, index.stderr
    report = json.loads(index.stdout)
    assert report["indexed"] == 2 and report["embedded"] >= 2 and not report.get("error")
    assert "MODULES llama_cpp=False xllamacpp=True" in index.stderr
    found = cli("llama_cpp", "search", "--json", "what does my pet take for its illness", env=minilm_config)
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["mode"] == "hybrid" and result["provider"] == "local"
    assert result["results"][0]["path"] == "memory/2026-11-20.md"  # a paraphrase: no word in common
    assert "MODULES llama_cpp=False xllamacpp=True" in found.stderr


def test_without_any_binding_index_keeps_keywords_fresh_warns_and_exits_0(minilm_config: dict[str, str]) -> None:
    index = cli("llama_cpp,xllamacpp", "index", env=minilm_config)
    assert index.returncode == 0, index.stderr
    assert "2 indexed" in index.stdout and "0 embedded" in index.stdout
    warning = index.stdout + index.stderr
    assert "neither xllamacpp nor llama-cpp-python is installed" in warning
    assert "Fix: install the local extra: pip install 'mdmemory[local]'" in warning
    found = cli("llama_cpp,xllamacpp", "search", "--json", "thyroid pills", env=minilm_config)
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert result["mode"] == "keyword" and result["results"][0]["path"] == "memory/2026-11-20.md"
    assert "neither xllamacpp nor llama-cpp-python" in json.dumps(result)
    text = cli("llama_cpp,xllamacpp", "search", "thyroid pills", env=minilm_config)
    assert text.returncode == 0 and "keyword" in text.stdout and "pip install 'mdmemory[local]'" in text.stdout


def test_a_missing_model_file_still_degrades_the_same_way(minilm_config: dict[str, str], tmp_path: Path) -> None:
    config = Path(minilm_config["MDMEMORY_CONFIG"])
    config.write_text(config.read_text().replace(str(MINILM), str(tmp_path / "gone.gguf")))
    index = cli("llama_cpp", "index", env=minilm_config)
    assert index.returncode == 0 and "gone.gguf does not exist" in index.stdout + index.stderr


def test_concurrent_counts_while_embedding_agree(pair: tuple[LocalEmbeddingProvider, ...]) -> None:
    """Counting (another thread, over the socket) does not wait for or disturb a running embedding."""
    ref, cand = pair
    lines = [f"note {i}: the quick brown fox {i * 7}" for i in range(300)]
    counts: list[list[int]] = []
    worker = threading.Thread(target=lambda: counts.append(cand.count_tokens_batch(lines)))
    worker.start()
    cand.embed_documents(TEXTS["english"] * 8)
    worker.join(60)
    assert counts == [[ref.count_tokens(t) for t in lines]]
