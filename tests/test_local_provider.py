"""LocalEmbeddingProvider on real llama.cpp: a tiny converted BERT, and the shared MiniLM when present."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from mdmem.providers.local import (
    LocalEmbeddingProvider,
    family_prefixes,
    is_model_available,
    parse_hf_uri,
    pull_model,
    resolve_model_path,
)
from mdmem.util.errors import ProviderError
from mdmem.util.tokens import estimate_tokens
from tests.conftest import MINILM

pytest.importorskip("llama_cpp")

HOSTILE = {
    "50k words": " ".join(["memory", "search", "agent", "notes"] * 12_500),
    "long CJK": "東京都の会議で記憶を検索する。" * 4_000,
    "one huge word": "x" * 200_000,
    "whitespace": " \n\t  \n",
    "empty": "",
    "lone surrogate": "before \ud800 after \udfff",
    "NUL": "a\x00b\x00\x00c",
}


@pytest.fixture(scope="module")
def tiny(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    provider = LocalEmbeddingProvider(str(tiny_gguf), tmp_path_factory.mktemp("cache"), threads=1)
    yield provider
    provider.close()


def assert_unit_rows(vectors: np.ndarray, dims: int) -> None:
    assert vectors.dtype == np.float32 and vectors.shape[1] == dims
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# -- loading --------------------------------------------------------------------------------------------


def test_model_loads_lazily_and_load_reports_limits(tiny_gguf: Path, tmp_path: Path) -> None:
    provider = LocalEmbeddingProvider(str(tiny_gguf), tmp_path, threads=1)
    assert provider.dims is None and provider._llm is None
    provider.load()
    assert (provider.dims, provider.max_input_tokens) == (32, 128)
    provider.close()
    provider.close()  # idempotent


def test_context_size_caps_the_limit(tiny_gguf: Path, tmp_path: Path) -> None:
    provider = LocalEmbeddingProvider(str(tiny_gguf), tmp_path, threads=1, context_size=32)
    try:
        provider.load()
        assert provider.max_input_tokens == 32
        cut = provider.truncate(HOSTILE["50k words"])
        assert 28 <= provider.count_tokens(cut) <= 32
        assert_unit_rows(provider.embed_documents([HOSTILE["50k words"]]), 32)
    finally:
        provider.close()
    with pytest.raises(ProviderError, match="too small"):
        LocalEmbeddingProvider(str(tiny_gguf), tmp_path, context_size=4)


def test_missing_and_invalid_model_files_name_the_path(tmp_path: Path, tiny_gguf: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ProviderError, match="nope.gguf"):
        LocalEmbeddingProvider(str(missing), tmp_path).embed_query("hi")
    text_file = tmp_path / "notes.gguf"
    text_file.write_text("this is not a model")
    provider = LocalEmbeddingProvider(str(text_file), tmp_path)  # construction never touches the model
    with pytest.raises(ProviderError, match="notes.gguf.*not a GGUF"):
        provider.load()
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:20_000])  # header intact, tensor data missing
    with pytest.raises(ProviderError, match="cut.gguf"):
        LocalEmbeddingProvider(str(truncated), tmp_path, threads=1).load()


def test_missing_llama_cpp_says_how_to_install(tiny_gguf: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # without either binding (test_xllama: with xllamacpp)
    with pytest.raises(ProviderError, match=r"pip install 'mdmem\[local\]'"):
        LocalEmbeddingProvider(str(tiny_gguf), tmp_path).load()


# -- tokens and truncation ------------------------------------------------------------------------------


def test_count_tokens_uses_the_model_tokenizer(tiny) -> None:
    # [CLS] hello world [SEP]; [CLS] the cat ##s [SEP]
    assert tiny.count_tokens("hello world") == 4 != estimate_tokens("hello world")
    assert tiny.count_tokens("The cats") == 5
    assert tiny.count_tokens("") == 2


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_truncate_fits_the_context_and_keeps_a_prefix(tiny, name: str) -> None:
    text = tiny.prepare_document(HOSTILE[name])
    cut = tiny.truncate(text)
    assert text.startswith(cut)
    assert tiny.count_tokens(cut) <= tiny.max_input_tokens == 128
    if tiny.count_tokens(text) > 128 and name != "one huge word":
        assert tiny.count_tokens(cut) >= 120  # the longest prefix that fits, not a blind cut


def test_hostile_inputs_embed_without_abort(tiny) -> None:
    texts = list(HOSTILE.values())
    assert_unit_rows(tiny.embed_documents(texts), 32)
    for text in texts:
        assert_unit_rows(tiny.embed_query(text)[None, :], 32)


def test_embed_batch_itself_never_passes_an_overlong_sequence(tiny) -> None:
    vectors = tiny.embed_batch([HOSTILE["50k words"], "hello"])
    assert vectors.shape == (2, 32) and np.all(np.isfinite(vectors))


def test_different_texts_give_different_vectors(tiny) -> None:
    a, b = tiny.embed_documents(["hello world", "the lazy dog sat on the mat"])
    assert float(a @ b) < 0.99


# -- prefixes and identity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf",
            "task: search result | query: ",
        ),
        ("nomic-embed-text-v1.5.Q8_0.gguf", "search_query: "),
        ("/models/multilingual-e5-small-q8_0.gguf", "query: "),
        ("hf:CompendiumLabs/bge-small-en-v1.5-gguf/bge-small-en-v1.5-f16.gguf", "Represent this sentence"),
        ("all-MiniLM-L6-v2-Q8_0.gguf", ""),
        ("mystery.gguf", ""),
    ],
)
def test_family_prefixes(name: str, expected: str, tmp_path: Path) -> None:
    query, _ = family_prefixes(name)
    assert query.startswith(expected) and (expected or query == "")
    provider = LocalEmbeddingProvider(name, tmp_path)
    assert provider.prepare_query("x") == query + "x"


def test_document_prefixes_and_overrides(tmp_path: Path) -> None:
    assert family_prefixes("nomic-embed-text-v1.5.gguf") == ("search_query: ", "search_document: ")
    assert family_prefixes("e5-base-v2.gguf") == ("query: ", "passage: ")
    assert family_prefixes("embeddinggemma.gguf")[1] == "title: none | text: "
    assert family_prefixes("bge-base-en-v1.5.gguf")[1] == ""
    provider = LocalEmbeddingProvider("nomic.gguf", tmp_path, query_prefix="", document_prefix="doc: ")
    assert (provider.prepare_query("q"), provider.prepare_document("d")) == ("q", "doc: d")


def test_provider_key_follows_prefixes_and_hides_home(tmp_path: Path) -> None:
    path = str(tmp_path / "home" / "user" / "models" / "model.gguf")
    plain = LocalEmbeddingProvider(path, tmp_path)
    prefixed = LocalEmbeddingProvider(path, tmp_path, query_prefix="query: ")
    assert plain.provider_key != prefixed.provider_key
    assert plain.provider_key == LocalEmbeddingProvider(path, tmp_path / "elsewhere").provider_key
    blob = json.dumps({"model": plain.model, **plain.identity()})
    assert str(tmp_path) not in blob and "model.gguf" in blob


def test_prefix_is_counted_inside_the_limit(tiny_gguf: Path, tmp_path: Path) -> None:
    provider = LocalEmbeddingProvider(str(tiny_gguf), tmp_path, threads=1, document_prefix="note: ")
    try:
        text = provider.prepare_document(HOSTILE["50k words"])
        cut = provider.truncate(text)
        assert cut.startswith("note: memory") and provider.count_tokens(cut) <= 128
    finally:
        provider.close()


# -- hf: URIs -------------------------------------------------------------------------------------------

URI = "hf:tiny-org/tiny-bert-GGUF/tiny-bert-f16.gguf"


@pytest.fixture
def hf_offline(monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def make_hf_cache(cache: Path, model: Path, repo: str = "tiny-org/tiny-bert-GGUF") -> Path:
    """The layout huggingface_hub writes: models--owner--repo/{refs/main, snapshots/<commit>/file}."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    shutil.copyfile(model, snapshot / model.name)
    return snapshot / model.name


def test_hf_uri_resolves_from_the_cache_offline(hf_offline, tiny_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hf-cache"
    placed = make_hf_cache(cache, tiny_gguf)
    assert resolve_model_path(URI, cache) == placed
    assert is_model_available(URI, cache)
    provider = LocalEmbeddingProvider(URI, cache, threads=1)
    try:
        assert provider.model == URI and provider.identity()["file"] == "tiny-bert-f16.gguf"
        assert_unit_rows(provider.embed_documents(["hello world"]), 32)
    finally:
        provider.close()


def test_hf_uri_not_cached_explains_the_fix(hf_offline, tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    missing = "hf:someone/missing-GGUF/model-q8_0.gguf"
    assert not is_model_available(missing, cache)
    for allow_download in (False, True):  # offline: a download is impossible either way
        with pytest.raises(ProviderError) as info:
            resolve_model_path(missing, cache, allow_download=allow_download)
        message = str(info.value)
        assert missing in message and str(cache) in message
        assert f"mdmem model pull {missing}" in message and "modelPath" in message
    with pytest.raises(ProviderError, match=missing):
        pull_model(missing, cache)
    with pytest.raises(ProviderError, match="missing-GGUF"):
        LocalEmbeddingProvider(missing, cache).embed_query("hi")


def test_local_paths_and_bad_uris(tiny_gguf: Path, tmp_path: Path) -> None:
    assert is_model_available(str(tiny_gguf), tmp_path)
    assert not is_model_available(str(tmp_path / "absent.gguf"), tmp_path)
    assert not is_model_available("hf:only-owner", tmp_path)
    assert parse_hf_uri("hf:a/b/sub/dir/m.gguf") == ("a/b", "sub/dir/m.gguf")
    with pytest.raises(ProviderError, match="hf:owner/repo/file.gguf"):
        parse_hf_uri("hf:a/b")
    assert pull_model(str(tiny_gguf), tmp_path) == (tiny_gguf, True)  # a local model is there already
    with pytest.raises(ProviderError, match="does not exist: check the path"):
        pull_model(str(tmp_path / "absent.gguf"), tmp_path)


# -- the shared MiniLM model ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory):
    if not MINILM.is_file():
        pytest.skip(f"{MINILM} is not present")
    provider = LocalEmbeddingProvider(str(MINILM), tmp_path_factory.mktemp("cache"), threads=2)
    yield provider
    provider.close()


def test_minilm_embeds_with_meaning(minilm) -> None:
    assert (minilm.query_prefix, minilm.document_prefix) == ("", "")
    query = minilm.embed_query("How do I reset my password?")
    docs = minilm.embed_documents(
        ["Steps to change a forgotten account password", "The recipe needs two cups of flour and an egg"]
    )
    assert minilm.dims == 384 and minilm.max_input_tokens == 512
    assert_unit_rows(docs, 384)
    assert float(docs[0] @ query) > float(docs[1] @ query) + 0.2


def test_minilm_survives_5000_tokens(minilm) -> None:
    text = " ".join(f"Meeting note {i}: the agent stored a preference about deployments." for i in range(500))
    assert minilm.count_tokens(text) > 5_000
    assert minilm.count_tokens(minilm.truncate(text)) <= 512
    assert_unit_rows(minilm.embed_documents([text, text[:100]]), 384)


def test_a_query_runs_on_one_llama_thread_and_batches_get_theirs_back(tiny_gguf: Path, tmp_path: Path) -> None:
    """A query (a few dozen tokens) is embedded on one llama.cpp thread, a batch on ``threads``; the query's
    vector is the one a batch gives for the same text."""
    import time

    import llama_cpp

    provider = LocalEmbeddingProvider(str(tiny_gguf), tmp_path, threads=2)
    try:
        provider.load()
        ctx = provider._llm._ctx.ctx
        seen: list[tuple[int, int]] = []
        provider._on_query_threads(
            lambda: seen.append((llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)))
        )
        assert seen == [(1, 1)]
        assert (llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)) == (2, 2)
        query = provider.embed_query_within("the backups run at night", time.monotonic() + 30)
        np.testing.assert_allclose(query, provider.embed_documents(["the backups run at night"])[0], atol=1e-5)
        assert (llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)) == (2, 2)
    finally:
        provider.close()


def test_short_inputs_share_a_decode_and_give_the_vectors_they_get_alone(tiny) -> None:
    """Consecutive short inputs (a chunk's windows) are decoded together while they fit the context; an input
    over ``SHARED_DECODE_TOKENS`` goes alone; the vectors are those of one input per decode, in order."""
    short = [f"note {i} about the backup" for i in range(12)]
    tiny.load()
    limit = tiny.max_input_tokens
    long = "the garden"
    while tiny.count_tokens(long + " needs water") <= limit - 10:
        long += " needs water"
    assert tiny.count_tokens(long) > 40
    texts = [*short[:5], long, *short[5:], "x" * 2000]
    tiny.SHARED_DECODE_TOKENS = 40
    try:
        groups = tiny._decode_groups(texts)
        assert [t for g in groups for t in g][:-1] == texts[:-1]  # the order is kept (the last one truncated)
        assert [long] in groups and len(groups) < len(texts) - 2  # short ones shared decodes, the long did not
        for g in groups:
            assert len(g) == 1 or sum(tiny.count_tokens(t) for t in g) <= limit
        together = tiny.embed_documents(texts)
        alone = np.vstack([tiny.embed_documents([t]) for t in texts])
        np.testing.assert_allclose((together * alone).sum(axis=1), 1.0, atol=1e-3)
    finally:
        del tiny.SHARED_DECODE_TOKENS
