"""Convert a sentence-transformers BERT-family folder (MiniLM, bge, e5, ...) to a GGUF file for llama.cpp.

Only ``gguf``, ``safetensors`` and ``numpy`` are needed (no torch, no transformers): the local extra
``pip install 'mdmem[local]'`` has them. The output mirrors what llama.cpp's ``convert_hf_to_gguf.py``
writes for ``BertModel``:

- tensor names come from gguf's tensor-name map for ``MODEL_ARCH.BERT``;
- the WordPiece vocabulary is stored in llama.cpp's "phantom space" form: control tokens unchanged,
  ``##`` continuation pieces without the ``##``, every other (word-initial) piece prefixed with ``\u2581``;
- pooling (mean / cls / last) comes from ``1_Pooling/config.json``, lowercasing from tokenizer_config.json.

Weight matrices are written as f32, f16 or q8_0 (rows must be a multiple of 32 for q8_0, otherwise f16).
Norms, biases, position and token-type embeddings always stay f32, as upstream does.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mdmem.providers.bert_folder import BertSource, ConversionError, read_bert_folder

__all__ = ["OUT_TYPES", "BertSource", "ConversionError", "convert_bert", "read_bert_folder"]

OUT_TYPES = ("f32", "f16", "q8_0")
_SKIPPED_PREFIXES = ("pooler.", "cls.predictions", "cls.seq_relationship")
_STRIPPED_PREFIXES = ("bert.", "model.", "auto_model.", "0.auto_model.")


def convert_bert(src_dir: str | os.PathLike[str], out_path: str | os.PathLike[str], out_type: str = "f16") -> Path:
    """Convert the BERT-family model in ``src_dir`` to a GGUF file at ``out_path``; returns the path.

    ``out_type`` is ``"f32"``, ``"f16"`` or ``"q8_0"``. The file is written to a temporary name in the
    target folder and renamed at the end, so a failed conversion never leaves a half-written model.
    Raises ``ConversionError`` naming the missing file or key and what to do about it.
    """
    if out_type not in OUT_TYPES:
        raise ConversionError(f"unknown output type {out_type!r}: use one of {', '.join(OUT_TYPES)}")
    try:
        import gguf
    except ImportError as exc:  # pragma: no cover - the test extra always has gguf
        raise ConversionError(
            "converting a model needs the gguf and safetensors packages: pip install 'mdmem[local]'"
        ) from exc

    source = read_bert_folder(Path(src_dir))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=out.name + ".", suffix=".part", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    try:
        _write_metadata(writer, source, out_type)
        for name, data, raw_dtype in _gguf_tensors(source, out_type):
            writer.add_tensor(name, data, raw_dtype=raw_dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(out)
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
    return out


# -- reading the source folder ------------------------------------------------------------------------


# -- writing --------------------------------------------------------------------------------------------


def _write_metadata(writer: Any, src: BertSource, out_type: str) -> None:
    import gguf

    cfg = src.config
    writer.add_name(src.name)
    writer.add_context_length(int(cfg["max_position_embeddings"]))
    writer.add_embedding_length(int(cfg["hidden_size"]))
    writer.add_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_block_count(int(cfg["num_hidden_layers"]))
    writer.add_head_count(int(cfg["num_attention_heads"]))
    writer.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_pooling_type(
        {"mean": gguf.PoolingType.MEAN, "cls": gguf.PoolingType.CLS, "last": gguf.PoolingType.LAST}[src.pooling]
    )
    writer.add_file_type(
        {
            "f32": gguf.LlamaFileType.ALL_F32,
            "f16": gguf.LlamaFileType.MOSTLY_F16,
            "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        }[out_type]
    )
    writer.add_token_type_count(int(cfg.get("type_vocab_size", 2)))

    tokens, types = [], []
    for i, tok in enumerate(src.tokens):
        if i in src.control_ids:
            tokens.append(tok)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(tok[2:] if tok.startswith("##") else "\u2581" + tok)
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    ids = src.special_ids
    writer.add_bos_token_id(ids["cls"])  # llama.cpp's WPM tokenizer uses BOS as [CLS]
    writer.add_sep_token_id(ids["sep"])
    writer.add_unk_token_id(ids["unk"])
    writer.add_pad_token_id(ids.get("pad", 0))
    if "mask" in ids:
        writer.add_mask_token_id(ids["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_sep_token(True)
    # BertNormalizer options (llama.cpp >= 2025 reads these; it does not lowercase when they are absent)
    writer.add_bool("tokenizer.ggml.normalizer.lowercase", src.lowercase)
    writer.add_bool("tokenizer.ggml.normalizer.strip_accents", src.strip_accents)


def _gguf_tensors(src: BertSource, out_type: str) -> Iterator[tuple[str, np.ndarray, Any]]:
    import gguf

    n_layers = int(src.config["num_hidden_layers"])
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    keep_f32 = {gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES}
    seen: set[str] = set()
    for hf_name in sorted(src.tensors):
        name = _normalise_name(hf_name)
        if name is None:
            continue
        new_name = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ConversionError(
                f"tensor {hf_name!r} has no llama.cpp BERT equivalent: is this a plain BERT model "
                "(not a classifier or a different architecture)?"
            )
        kind = name_map.get_type(name, try_suffixes=(".weight", ".bias"))
        data = np.asarray(src.tensors[hf_name], dtype=np.float32)
        seen.add(new_name)
        if data.ndim < 2 or kind in keep_f32 or out_type == "f32":
            yield new_name, np.ascontiguousarray(data), None
        elif out_type == "q8_0" and data.shape[-1] % 32 == 0:
            q8 = gguf.GGMLQuantizationType.Q8_0
            yield new_name, gguf.quants.quantize(data, q8), q8
        else:
            yield new_name, data.astype(np.float16), None
    _check_complete(seen, n_layers)


def _normalise_name(name: str) -> str | None:
    """Strip wrapper prefixes and old gamma/beta names; ``None`` for tensors llama.cpp does not use."""
    for prefix in _STRIPPED_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.endswith(".gamma"):
        name = name[: -len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[: -len(".beta")] + ".bias"
    if name == "embeddings.position_ids" or name.startswith(_SKIPPED_PREFIXES):
        return None
    return name


def _check_complete(seen: set[str], n_layers: int) -> None:
    required = ["token_embd.weight", "position_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias"]
    per_layer = ("attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm", "ffn_up", "ffn_down")
    for i in range(n_layers):
        required += [f"blk.{i}.{part}.weight" for part in (*per_layer, "layer_output_norm")]
    missing = [name for name in required if name not in seen]
    if missing:
        raise ConversionError(
            f"the safetensors weights lack {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: "
            "the file is incomplete or not a BERT encoder"
        )
