"""Late chunking (``chunking.windowVectors: "late"``): window vectors pooled from one llama.cpp pass over the
chunk, checked against llama.cpp's own per-token embeddings of the chunk text; spans, fallback, identity."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.index.embedding import embedding_windows, window_inputs
from mdmem.index.late import late_setup
from mdmem.memory import Memory
from mdmem.pack.inputs import window_similarities
from mdmem.providers import native
from mdmem.search.hybrid import Hit
from mdmem.store import ChunkRow
from tests.conftest import MINILM, both_backends, write

needs_minilm = pytest.mark.skipif(
    not MINILM.is_file() or importlib.util.find_spec("llama_cpp") is None, reason=f"needs llama_cpp and {MINILM}"
)
ATX = re.compile(r"^(#{1,6})\s+")

TRIP = "\n".join(
    [
        "# Trip to Lake Biwa",
        "",
        "## Day 1",
        "",
        *(
            f"- Caroline said the ferry to the north shore leaves at {7 + i}:15 and costs {300 + i} yen."
            for i in range(9)
        ),
        "- 琵琶湖の北岸へのフェリーは朝七時十五分に出発し、料金は三百円です。竹生島にも寄ります。",
        "- " + " ".join(f"word{i} lakeside cycling route segment" for i in range(40)),  # one long line: its own window
        "",
        "## Day 2",
        "",
        *(f"- Melanie rented bicycle number {i} near Nagahama castle and rode {10 + i} km." for i in range(20)),
        "- 自転車を長浜城の近くで借りて、湖岸を二十キロ走りました。",
    ]
)


def local_settings(**chunking: Any) -> dict[str, Any]:
    return {
        "local": {"modelPath": str(MINILM), "threads": 2},
        "chunking": {"windowVectors": "late", **chunking},
        "cache": {"enabled": False},
    }


class DirectLlama:
    """llama.cpp's per-token embeddings of a text, from a plain ``Llama`` with pooling none (not mdmem's)."""

    def __init__(self) -> None:
        llama_cpp, _ = native.load_llama_cpp(native.loaded_variant())
        self.llm = llama_cpp.Llama(
            model_path=str(MINILM),
            embedding=True,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
            n_ctx=512,
            n_batch=512,
            n_ubatch=512,
            flash_attn=True,  # as the provider decodes (flash attention moves the last digits)
            verbose=False,
        )

    def ntokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode(), add_bos=False))

    def tokens(self, text: str) -> np.ndarray:
        return np.asarray(self.llm.embed(text), dtype=np.float32)


def input_text(chunk: ChunkRow) -> tuple[str, list[tuple[int, int]]]:
    """The chunk's input as embedded whole, and the character range of each of its lines (file order);
    the heading path decoded first counts as line ``start_line - 1``."""
    lines = chunk.text.split("\n")
    prefix = chunk.heading + "\n" if chunk.heading and not chunk.text.lstrip().startswith("#") else ""
    spans = [(0, len(prefix) - 1)] if prefix else []
    at = len(prefix)
    for line in lines:
        spans.append((at, at + len(line)))
        at += len(line) + 1
    return prefix + chunk.text, spans


def expected_window(direct: DirectLlama, chunk: ChunkRow, first: int, last: int) -> np.ndarray:
    """The mean of llama.cpp's token vectors of the chunk over the window's lines and the headings in force
    at its first line, normalised: computed from character offsets, independently of mdmem's pieces."""
    text, chars = input_text(chunk)
    offset = 1 if len(chars) > len(chunk.text.split("\n")) else 0  # the heading line decoded first
    line_at = {chunk.start_line + i: chars[i + offset] for i in range(len(chars) - offset)}
    picked: list[tuple[int, int]] = [chars[0]] if offset else []
    levels: dict[int, tuple[int, int]] = {}
    for n in range(chunk.start_line, first):
        m = ATX.match(chunk.text.split("\n")[n - chunk.start_line])
        if m:
            level = len(m.group(1))
            levels = {lv: s for lv, s in levels.items() if lv < level} | {level: line_at[n]}
    picked += list(levels.values()) + [line_at[n] for n in range(first, last + 1)]
    vectors = direct.tokens(text)
    rows = sorted({1 + i for a, b in picked for i in range(direct.ntokens(text[:a]), direct.ntokens(text[:b]))})
    assert rows[-1] <= len(vectors) - 2  # never the trailing [SEP]
    mean = vectors[rows].mean(axis=0)
    return mean / np.linalg.norm(mean)


@needs_minilm
@both_backends
def test_late_window_vectors_are_the_mean_of_llama_cpp_token_embeddings(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "memory" / "2026-05-01.md", TRIP)
    mem = make_memory(local_settings(), provider="local")
    report = mem.sync()
    assert report["embedded"] > 0 and not report.get("embedError")
    provider = mem.choice.provider
    assert provider is not None
    setup = late_setup(provider, mem.settings.chunking)
    assert setup == (512, 0)
    direct = DirectLlama()
    chunks = mem.store.chunks_of("memory/2026-05-01.md")
    assert len(chunks) >= 2  # overlapping chunks: the second starts mid-file, under a heading decoded first
    checked = 0
    for chunk in chunks:
        windows, plan = window_inputs(chunk, 64, provider.count_tokens, setup)
        assert plan is not None and len(windows) > 1
        assert [w[1:] for w in windows] == embedding_windows(chunk, 64, provider.count_tokens)  # same windows
        stored = mem.store.vectors_by_hash([key for key, *_ in windows])
        assert len(stored) == len(windows)
        separate = provider.embed_documents([text for _, text, _, _ in windows])
        for (key, _, first, last), alone in zip(windows, separate, strict=True):
            want = expected_window(direct, chunk, first, last)
            assert float(stored[key] @ want) >= 0.9999
            assert float(stored[key] @ alone) < 0.999  # pooled in context: not the window embedded alone
            checked += 1
    assert checked >= 8
    lines = [
        w for c in chunks for _, text, _, _ in window_inputs(c, 64, provider.count_tokens, setup)[0] for w in [text]
    ]
    assert any("琵琶湖" in t for t in lines) and any("word39" in t for t in lines)  # CJK and the long line

    # search and packs find the late windows by their keys
    hits = mem.search("which bicycle did Melanie rent near the castle?", max_results=3, min_score=0.0)["results"]
    assert hits and hits[0]["path"] == "memory/2026-05-01.md"
    pack = mem.pack("ferry to the north shore fare", budget_tokens=300)
    assert pack["items"] and any("ferry" in item["text"] for item in pack["items"])
    vector = provider.embed_query("ferry to the north shore fare")
    found = window_similarities(mem.store, [Hit(c, 1.0) for c in chunks], vector, 64, provider.count_tokens, setup)
    assert all(len(found[c.id]) == len(window_inputs(c, 64, provider.count_tokens, setup)[0]) for c in chunks if c.id)


@needs_minilm
def test_a_chunk_over_the_context_falls_back_to_separate_windows(
    workspace: Path, make_memory: Callable[..., Memory], capfd: pytest.CaptureFixture[str]
) -> None:
    long = "\n".join(f"- Tomás booked room {i} at the ryokan in Kinosaki for the onsen weekend." for i in range(40))
    write(workspace / "memory" / "2026-05-02.md", "# Kinosaki\n\n" + long)
    write(workspace / "memory" / "2026-05-03.md", "# Short\n\n- Priya fed the cat.\n- Dana watered the basil.\n")
    mem = make_memory(
        local_settings(windowTokens=16) | {"local": {"modelPath": str(MINILM), "contextSize": 128}}, provider="local"
    )
    mem.sync()
    provider = mem.choice.provider
    assert provider is not None
    setup = late_setup(provider, mem.settings.chunking)
    assert setup[0] == 128
    big = mem.store.chunks_of("memory/2026-05-02.md")[0]
    windows, plan = window_inputs(big, 16, provider.count_tokens, setup)
    assert plan is None and len(windows) > 1  # over 128 tokens: separate windows, keyed by their text
    stored = mem.store.vectors_by_hash([key for key, *_ in windows])
    alone = provider.embed_documents([text for _, text, _, _ in windows])
    sims = [float(stored[key] @ v) for (key, *_), v in zip(windows, alone, strict=True)]
    assert min(sims) >= 0.999, sims  # decodes shared with other windows move the 4th digit
    small = mem.store.chunks_of("memory/2026-05-03.md")[0]
    windows, plan = window_inputs(small, 16, provider.count_tokens, setup)
    assert plan is not None and set(mem.store.vectors_by_hash([key for key, *_ in windows])) == {k for k, *_ in windows}
    assert "pooling_type" not in capfd.readouterr().err  # llama.cpp's warning about pooling none stays off the terminal


@needs_minilm
@both_backends
def test_switching_window_vectors_rebuilds_the_index(notes_workspace: Path, make_memory: Callable[..., Memory]) -> None:
    first = make_memory(local_settings(windowTokens=8) | {"chunking": {"windowTokens": 8}}, provider="local")
    assert first.sync()["indexed"] == 3
    assert "windowVectors" not in first.store.get_meta("identity")  # indexes built before the option keep theirs
    late = make_memory(local_settings(windowTokens=8), provider="local")
    report = late.sync()
    assert report["rebuilt"] is True and report["indexed"] == 3
    assert late.store.get_meta("identity")["windowVectors"] == "late"
    assert late.sync()["rebuilt"] is False
    assert late.search("heron", max_results=3, min_score=0.0)["mode"] == "hybrid"
    back = make_memory(
        local_settings(windowTokens=8) | {"chunking": {"windowTokens": 8, "windowVectors": "separate"}},
        provider="local",
    )
    assert back.sync()["rebuilt"] is True


@both_backends
def test_late_with_a_provider_without_token_vectors_keeps_the_index(
    notes_workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    first = make_memory()  # the counting hash provider: no per-token embeddings, so windows stay separate
    assert first.sync()["indexed"] == 3
    late = make_memory({"chunking": {"windowVectors": "late"}})
    assert late.sync()["rebuilt"] is False  # the same vectors either way: nothing to rebuild
    assert "windowVectors" not in late.store.get_meta("identity")


@pytest.fixture
def notes_workspace(workspace: Path) -> Path:
    for i in range(3):
        body = "\n".join(f"- The heron number {i} waded past reed bed {j} at dawn." for j in range(4))
        write(workspace / "memory" / f"2026-04-0{i + 1}.md", f"# Day {i}\n\n{body}\n")
    return workspace


def test_a_bad_window_vectors_value_names_the_key(tmp_path: Path) -> None:
    import json

    from mdmem.config.load import load_config
    from mdmem.util.errors import ConfigError

    path = tmp_path / "config.json5"
    path.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"chunking": {"windowVectors": "lazy"}}}}}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "agents.defaults.memorySearch.chunking.windowVectors"
    assert 'expected one of "separate", "late"' in str(info.value) and "Fix:" in str(info.value)


def test_the_xllamacpp_binding_keeps_separate_windows_and_says_so_in_the_identity(tmp_path: Path) -> None:
    from mdmem.config.settings import ChunkingConfig
    from mdmem.index.late import late_identity
    from mdmem.providers.local import LLAMA_CPP_PYTHON, LocalEmbeddingProvider

    late = ChunkingConfig(window_vectors="late")
    xllama = LocalEmbeddingProvider(str(MINILM), tmp_path, binding="xllamacpp")  # not loaded: nothing to decode
    assert xllama.token_embeddings is False
    assert late_identity(late, xllama) == {} and late_setup(xllama, late) == (0, 0)
    native_binding = LocalEmbeddingProvider(str(MINILM), tmp_path, binding=LLAMA_CPP_PYTHON)
    assert native_binding.token_embeddings is True and late_identity(late, native_binding) == {"windowVectors": "late"}
