"""Converter tests: the GGUF written from a tiny random BERT must embed like a numpy BERT forward pass."""

from __future__ import annotations

import json
import math
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from mdmem.providers.bert_to_gguf import ConversionError, convert_bert
from mdmem.providers.local import LocalEmbeddingProvider
from mdmem.util.errors import MdMemoryError
from tests.conftest_gguf import HEADS, VOCAB, tiny_bert_weights, write_tiny_bert

gguf = pytest.importorskip("gguf")
pytest.importorskip("llama_cpp")

SENTENCES = [
    "Hello world!",
    "The quick brown fox jumped over the lazy dog.",
    "Alice and Bob met today about the project meeting; we searched memory notes.",
    "Unable runners, quickly: red, blue and green (river bank) 42 days",
    "Café naïve xyzzy",
]


# -- a reference BERT in numpy --------------------------------------------------------------------------


def basic_tokenize(text: str) -> list[str]:
    """BERT BasicTokenizer, uncased: lowercase, strip accents, split on whitespace and punctuation."""
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    words: list[str] = []
    for chunk in text.split():
        current = ""
        for ch in chunk:
            if unicodedata.category(ch).startswith("P") or (ch.isascii() and not ch.isalnum()):
                if current:
                    words.append(current)
                words.append(ch)
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


def wordpiece_ids(text: str, vocab: list[str] = VOCAB) -> list[int]:
    """[CLS] + greedy longest-match-first WordPiece + [SEP]; a word with no full match becomes [UNK]."""
    index = {tok: i for i, tok in enumerate(vocab)}
    ids = [index["[CLS]"]]
    for word in basic_tokenize(text):
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in index:
                    pieces.append(index[piece])
                    start = end
                    break
            else:
                pieces = [index["[UNK]"]]
                break
        ids += pieces
    return ids + [index["[SEP]"]]


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    # llama.cpp's BERT uses ggml_gelu, the tanh approximation
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def reference_hidden(ids: list[int], w: dict[str, np.ndarray]) -> np.ndarray:
    """Last hidden states (tokens x hidden) of the HF BertModel with these weights, in float64."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids]
    x = x + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    layer = 0
    while f"encoder.layer.{layer}.attention.self.query.weight" in w:
        p = f"encoder.layer.{layer}."

        def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (dense(x, f"attention.self.{part}") for part in ("query", "key", "value"))
        d = q.shape[-1] // HEADS
        q, k, v = (t.reshape(n, HEADS, d).transpose(1, 0, 2) for t in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, HEADS * d)
        attn = dense(ctx, "attention.output.dense")
        x = _layer_norm(x + attn, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        ffn = dense(_gelu(dense(x, "intermediate.dense")), "output.dense")
        x = _layer_norm(x + ffn, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        layer += 1
    return x


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


# -- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def providers(tiny_ggufs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    # Q8_0 first: a process keeps the CPU backend its first model chose, and on a CPU that advertises AMX
    # the best one runs f32/f16 models but not Q8_0 ones (mdmem.providers.probe); the reverse holds
    made = {t: LocalEmbeddingProvider(str(tiny_ggufs[t]), cache, threads=1) for t in ("q8_0", "f16", "f32")}
    for provider in made.values():
        provider.load()
    yield made
    for provider in made.values():
        provider.close()


def read_gguf(path: Path) -> tuple[dict[str, object], dict[str, object]]:
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    return fields, {t.name: t for t in reader.tensors}


# -- numerical agreement --------------------------------------------------------------------------------


def test_reference_tokenizer_matches_llama_cpp(tiny_gguf: Path) -> None:
    from mdmem.providers.native import load_llama_cpp

    llama_cpp, _ = load_llama_cpp()  # the CPU backend a portable build ships

    llm = llama_cpp.Llama(str(tiny_gguf), vocab_only=True, verbose=False)
    try:
        for text in SENTENCES + ["", "   ", "HELLO, World"]:
            assert llm.tokenize(text.encode(), add_bos=True, special=False) == wordpiece_ids(text), text
    finally:
        llm.close()


@pytest.mark.parametrize(("out_type", "min_cosine"), [("f32", 0.999), ("f16", 0.999), ("q8_0", 0.99)])
def test_llama_cpp_embeddings_match_numpy_bert(providers, out_type: str, min_cosine: float) -> None:
    weights = tiny_bert_weights(seed=0)
    vectors = providers[out_type].embed_documents(SENTENCES)
    references = [unit(reference_hidden(wordpiece_ids(s), weights).mean(axis=0)) for s in SENTENCES]
    cosines = [float(np.dot(v, r)) for v, r in zip(vectors, references, strict=True)]
    assert min(cosines) >= min_cosine, cosines
    # the check has teeth: different sentences give clearly different vectors
    assert float(np.dot(references[0], references[1])) < 0.95


def test_cls_pooling_and_prefixed_tensor_names(tmp_path: Path) -> None:
    src = write_tiny_bert(tmp_path / "cls-bert", seed=3, pooling="cls", prefix="bert.")
    out = convert_bert(src, tmp_path / "cls.gguf", "f32")
    fields, _ = read_gguf(out)
    assert fields["bert.pooling_type"] == int(gguf.PoolingType.CLS)
    provider = LocalEmbeddingProvider(str(out), tmp_path, threads=1)
    try:
        text = SENTENCES[1]
        got = provider.embed_query(text)
    finally:
        provider.close()
    expected = unit(reference_hidden(wordpiece_ids(text), tiny_bert_weights(seed=3))[0])
    assert float(np.dot(got, expected)) >= 0.999


# -- file contents --------------------------------------------------------------------------------------


def test_metadata_and_vocab_in_llama_cpp_bert_form(tiny_gguf: Path) -> None:
    fields, tensors = read_gguf(tiny_gguf)
    assert fields["general.architecture"] == "bert"
    assert fields["bert.context_length"] == 128
    assert fields["bert.embedding_length"] == 32
    assert fields["bert.feed_forward_length"] == 64
    assert fields["bert.block_count"] == 2
    assert fields["bert.attention.head_count"] == 2
    assert fields["bert.attention.causal"] is False
    assert fields["bert.pooling_type"] == int(gguf.PoolingType.MEAN)
    assert fields["tokenizer.ggml.token_type_count"] == 2
    assert fields["tokenizer.ggml.model"] == "bert"
    assert fields["tokenizer.ggml.normalizer.lowercase"] is True
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields["tokenizer.ggml.token_type"]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert types[:5] == [int(gguf.TokenType.CONTROL)] * 5
    assert tokens[VOCAB.index("hello")] == "\u2581hello"
    assert tokens[VOCAB.index("##ing")] == "ing"
    assert types[VOCAB.index("hello")] == int(gguf.TokenType.NORMAL)
    assert fields["tokenizer.ggml.bos_token_id"] == VOCAB.index("[CLS]")
    assert fields["tokenizer.ggml.seperator_token_id"] == VOCAB.index("[SEP]")
    assert fields["tokenizer.ggml.unknown_token_id"] == VOCAB.index("[UNK]")
    assert fields["tokenizer.ggml.padding_token_id"] == 0
    assert fields["tokenizer.ggml.mask_token_id"] == VOCAB.index("[MASK]")
    assert "embeddings.position_ids" not in tensors and not any(n.startswith("pooler") for n in tensors)
    assert tensors["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F16


def test_q8_0_quantizes_matrices_and_keeps_norms_f32(tiny_ggufs: dict[str, Path]) -> None:
    _, tensors = read_gguf(tiny_ggufs["q8_0"])
    q8, f32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"):
        assert tensors[name].tensor_type == q8, name
    for name in ("position_embd.weight", "token_types.weight", "token_embd_norm.weight", "blk.0.attn_q.bias"):
        assert tensors[name].tensor_type == f32, name
    _, f32_tensors = read_gguf(tiny_ggufs["f32"])
    assert all(t.tensor_type == f32 for t in f32_tensors.values())


# -- friendly errors ------------------------------------------------------------------------------------


def _broken_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (lambda d: (d / "config.json").unlink(), "config.json"),
        (lambda d: (d / "vocab.txt").unlink(), "vocab.txt"),
        (lambda d: (d / "model.safetensors").unlink(), "model.safetensors"),
        (
            lambda d: (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True})),
            "pooling_mode_max_tokens",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps({"model_type": "roberta"})),
            "convert_hf_to_gguf",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32})),
            "num_hidden_layers",
        ),
        (lambda d: (d / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n"), "[CLS]"),
    ],
)
def test_broken_folders_raise_friendly_errors(tiny_bert_dir: Path, tmp_path: Path, breakage, expected) -> None:
    src = _broken_copy(tiny_bert_dir, tmp_path / "broken")
    breakage(src)
    with pytest.raises(ConversionError, match=expected.replace("[", r"\[").replace("]", r"\]")) as info:
        convert_bert(src, tmp_path / "out" / "model.gguf")
    assert isinstance(info.value, MdMemoryError)
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


def test_missing_tensor_names_the_tensor_and_leaves_no_partial_file(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    src = write_tiny_bert(tmp_path / "bert")
    weights = tiny_bert_weights()
    del weights["encoder.layer.1.output.dense.weight"]
    save_file(weights, str(src / "model.safetensors"))
    with pytest.raises(ConversionError, match=r"blk\.1\.ffn_down\.weight"):
        convert_bert(src, tmp_path / "out" / "model.gguf")
    assert list((tmp_path / "out").iterdir()) == []


def test_bad_arguments(tmp_path: Path, tiny_bert_dir: Path) -> None:
    with pytest.raises(ConversionError, match="q8_0"):
        convert_bert(tiny_bert_dir, tmp_path / "x.gguf", "q4_k")
    with pytest.raises(ConversionError, match="does not exist"):
        convert_bert(tmp_path / "nowhere", tmp_path / "x.gguf")
