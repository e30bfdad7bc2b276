"""Tiny real BERT models for the converter and local-provider tests.

``write_tiny_bert`` writes a seeded random BERT (WordPiece vocabulary of ~120 tokens, hidden 32, 2 layers,
2 heads) as a sentence-transformers folder with safetensors weights; the fixtures convert it to GGUF once
per session. ``tests/conftest.py`` lists this module in ``pytest_plugins``, so every test can use them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mdmem.providers.bert_to_gguf import convert_bert

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = (
    "the cat dog sat on mat quick brown fox jump over lazy hello world memory search index agent note "
    "today we met alice bob project meeting about vector keyword file line river bank red blue green "
    "day run un"
).split()
SUFFIXES = ["##ed", "##ing", "##er", "##ly", "##able"]
PUNCT = list(".,!?'-:;()")
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = SPECIALS + PUNCT + list("0123456789") + LETTERS + ["##" + c for c in LETTERS] + WORDS + SUFFIXES

HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 32, 2, 2, 64, 128


def tiny_bert_config() -> dict[str, object]:
    """config.json of the tiny BERT."""
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "max_position_embeddings": POSITIONS,
        "type_vocab_size": 2,
        "vocab_size": len(VOCAB),
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
    }


def tiny_bert_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random weights under Hugging Face BertModel names (no prefix)."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def vec(n: int, scale: float = 0.1, base: float = 0.0) -> np.ndarray:
        return (base + rng.standard_normal(n) * scale).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": mat(len(VOCAB), HIDDEN, 1.0),
        "embeddings.position_embeddings.weight": mat(POSITIONS, HIDDEN, 0.3),
        "embeddings.token_type_embeddings.weight": mat(2, HIDDEN, 0.3),
        "embeddings.LayerNorm.weight": vec(HIDDEN, base=1.0),
        "embeddings.LayerNorm.bias": vec(HIDDEN),
        "embeddings.position_ids": np.arange(POSITIONS, dtype=np.int64)[None, :],
        "pooler.dense.weight": mat(HIDDEN, HIDDEN, 0.2),
        "pooler.dense.bias": vec(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for part in ("query", "key", "value"):
            w[p + f"attention.self.{part}.weight"] = mat(HIDDEN, HIDDEN, 0.3)
            w[p + f"attention.self.{part}.bias"] = vec(HIDDEN)
        w[p + "attention.output.dense.weight"] = mat(HIDDEN, HIDDEN, 0.2)
        w[p + "attention.output.dense.bias"] = vec(HIDDEN)
        w[p + "attention.output.LayerNorm.weight"] = vec(HIDDEN, base=1.0)
        w[p + "attention.output.LayerNorm.bias"] = vec(HIDDEN)
        w[p + "intermediate.dense.weight"] = mat(FFN, HIDDEN, 0.3)
        w[p + "intermediate.dense.bias"] = vec(FFN)
        w[p + "output.dense.weight"] = mat(HIDDEN, FFN, 0.2)
        w[p + "output.dense.bias"] = vec(HIDDEN)
        w[p + "output.LayerNorm.weight"] = vec(HIDDEN, base=1.0)
        w[p + "output.LayerNorm.bias"] = vec(HIDDEN)
    return w


def write_tiny_bert(folder: Path, seed: int = 0, pooling: str = "mean", prefix: str = "") -> Path:
    """Write the tiny BERT as a sentence-transformers folder; ``prefix`` (``"bert."``) renames tensors."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(tiny_bert_config()))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 128}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling_cfg = {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
    }
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_cfg))
    (folder / "2_Normalize").mkdir(exist_ok=True)
    weights = {prefix + name: value for name, value in tiny_bert_weights(seed).items()}
    save_file(weights, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT sentence-transformers folder (seed 0, mean pooling)."""
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_ggufs(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny BERT converted to GGUF in each output type: {"f32": path, "f16": path, "q8_0": path}."""
    out = tmp_path_factory.mktemp("tiny-gguf")
    return {t: convert_bert(tiny_bert_dir, out / f"tiny-bert-{t}.gguf", t) for t in ("f32", "f16", "q8_0")}


@pytest.fixture(scope="session")
def tiny_gguf(tiny_ggufs: dict[str, Path]) -> Path:
    """The tiny BERT as an f16 GGUF."""
    return tiny_ggufs["f16"]


@pytest.fixture(scope="session", autouse=True)
def llama_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """The llama.cpp CPU backend of this test process, loaded before any test: the one a Q8_0 model runs on.

    A process keeps the backend its first model chose (mdmem.providers.native), and the tests load f32,
    f16 and Q8_0 models in one process. On a CPU that advertises AMX the best backend runs f16 models but dies
    on Q8_0 ones, while the one a Q8_0 model needs runs every type: so that one is chosen first, through the
    crash probe as the product does. None where llama-cpp-python or gguf is not installed."""
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError:
        return None
    from mdmem.providers import native, probe

    q8_0 = request.getfixturevalue("tiny_ggufs")["q8_0"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MDMEMORY_PROBE_CACHE", str(request.getfixturevalue("probe_cache")))
        variant = probe.ensure_runs(q8_0, 128, 1, loaded=native.loaded_variant())
    return native.load_llama_cpp(variant)[1]
