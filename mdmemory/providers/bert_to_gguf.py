"""Convert a sentence-transformers BERT-family folder (MiniLM, bge, e5, ...) to a GGUF file for llama.cpp.

Only ``gguf``, ``safetensors`` and ``numpy`` are needed (no torch, no transformers): the local extra
``pip install 'mdmemory[local]'`` has them. The output mirrors what llama.cpp's ``convert_hf_to_gguf.py``
writes for ``BertModel``:

- tensor names come from gguf's tensor-name map for ``MODEL_ARCH.BERT``;
- the WordPiece vocabulary is stored in llama.cpp's "phantom space" form: control tokens unchanged,
  ``##`` continuation pieces without the ``##``, every other (word-initial) piece prefixed with ``\u2581``;
- pooling (mean / cls / last) comes from ``1_Pooling/config.json``, lowercasing from tokenizer_config.json.

Weight matrices are written as f32, f16 or q8_0 (rows must be a multiple of 32 for q8_0, otherwise f16).
Norms, biases, position and token-type embeddings always stay f32, as upstream does.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mdmemory.util.errors import MdMemoryError

OUT_TYPES = ("f32", "f16", "q8_0")
_GELU_ACTS = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"}
_SKIPPED_PREFIXES = ("pooler.", "cls.predictions", "cls.seq_relationship")
_STRIPPED_PREFIXES = ("bert.", "model.", "auto_model.", "0.auto_model.")
_SPECIAL_DEFAULTS = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "pad": "[PAD]",
    "unk": "[UNK]",
    "mask": "[MASK]",
}


class ConversionError(MdMemoryError):
    """A model folder cannot be converted to GGUF; the message names the file or key and the fix."""


@dataclass(frozen=True)
class BertSource:
    """Everything read from a model folder that the GGUF needs."""

    name: str
    config: dict[str, Any]
    tokens: list[str]
    special_ids: dict[str, int]
    control_ids: frozenset[int]
    pooling: str
    lowercase: bool
    strip_accents: bool
    tensors: dict[str, np.ndarray]


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
            "converting a model needs the gguf and safetensors packages: pip install 'mdmemory[local]'"
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


def read_bert_folder(src: Path) -> BertSource:
    """Read config, vocabulary, tokenizer settings, pooling and weights of a sentence-transformers folder."""
    if not src.is_dir():
        raise ConversionError(f"model folder {src} does not exist: pass the folder that holds config.json")
    model_dir, pooling = _modules(src)
    config = _read_json(model_dir / "config.json", "the model's config.json (download the whole model folder)")
    _check_config(config, model_dir / "config.json")
    tok_config = _read_json_optional(model_dir / "tokenizer_config.json")
    tok_json = _read_json_optional(model_dir / "tokenizer.json")
    tokens = _read_vocab(model_dir, tok_json, int(config["vocab_size"]))
    index = {tok: i for i, tok in enumerate(tokens)}

    special_ids: dict[str, int] = {}
    for kind, default in _SPECIAL_DEFAULTS.items():
        text = _token_text(tok_config.get(f"{kind}_token")) or default
        if text in index:
            special_ids[kind] = index[text]
        elif kind in ("cls", "sep", "unk"):
            raise ConversionError(
                f"{kind} token {text!r} is not in the vocabulary of {model_dir}: "
                f"check '{kind}_token' in tokenizer_config.json and vocab.txt"
            )
    control = set(special_ids.values())
    for key, entry in (tok_config.get("added_tokens_decoder") or {}).items():
        if isinstance(entry, dict) and entry.get("special") and str(key).isdigit():
            control.add(int(key))

    lowercase, strip_accents = _normalizer(tok_config, tok_json)
    if _read_json_optional(src / "sentence_bert_config.json").get("do_lower_case"):
        lowercase = True  # sentence-transformers lowercases before the tokenizer sees the text
    return BertSource(
        name=src.resolve().name,
        config=config,
        tokens=tokens,
        special_ids=special_ids,
        control_ids=frozenset(control),
        pooling=pooling,
        lowercase=lowercase,
        strip_accents=strip_accents,
        tensors=_load_tensors(model_dir),
    )


def _modules(src: Path) -> tuple[Path, str]:
    """Transformer folder and pooling mode from ``modules.json`` (plain HF folder: itself and mean)."""
    modules_file = src / "modules.json"
    if not modules_file.is_file():
        return src, "mean"
    modules = _read_json(modules_file, "modules.json")
    model_dir, pooling = src, "mean"
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", ""))
        path = src / str(module.get("path", ""))
        if kind.endswith(".Transformer"):
            model_dir = path
        elif kind.endswith(".Pooling"):
            pooling = _pooling_mode(_read_json(path / "config.json", "the pooling config (1_Pooling/config.json)"))
        elif kind.endswith(".Dense"):
            raise ConversionError(
                f"{src} has a Dense module ({module.get('path')}) after pooling, which llama.cpp's BERT "
                "does not apply: choose a model without a Dense layer"
            )
    return model_dir, pooling


def _pooling_mode(cfg: dict[str, Any]) -> str:
    if cfg.get("pooling_mode_cls_token"):
        return "cls"
    if cfg.get("pooling_mode_mean_tokens"):
        return "mean"
    if cfg.get("pooling_mode_lasttoken"):
        return "last"
    modes = sorted(k for k, v in cfg.items() if k.startswith("pooling_mode") and v)
    raise ConversionError(
        f"pooling {modes or 'none'} in 1_Pooling/config.json is not supported by llama.cpp: "
        "only pooling_mode_mean_tokens, pooling_mode_cls_token or pooling_mode_lasttoken"
    )


def _check_config(config: dict[str, Any], path: Path) -> None:
    model_type = config.get("model_type", "bert")
    if model_type != "bert":
        raise ConversionError(
            f"{path}: model_type {model_type!r} is not BERT; this converter handles BERT-family models "
            "(MiniLM, bge, e5, gte-small/base): use llama.cpp's convert_hf_to_gguf.py for other architectures"
        )
    required = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "max_position_embeddings",
        "vocab_size",
    )
    missing = [key for key in required if key not in config]
    if missing:
        raise ConversionError(f"{path} lacks {', '.join(missing)}: is this a BERT config.json?")
    act = config.get("hidden_act", "gelu")
    if act not in _GELU_ACTS:
        raise ConversionError(f"{path}: hidden_act {act!r} is not supported (llama.cpp's BERT uses GELU)")
    position = config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ConversionError(f"{path}: position_embedding_type {position!r} is not supported (need absolute)")


def _read_vocab(model_dir: Path, tok_json: dict[str, Any], vocab_size: int) -> list[str]:
    vocab_file = model_dir / "vocab.txt"
    if vocab_file.is_file():
        tokens = vocab_file.read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
    elif tok_json.get("model", {}).get("type") == "WordPiece":
        by_id = {int(i): tok for tok, i in tok_json["model"]["vocab"].items()}
        tokens = [by_id.get(i, f"[PAD{i}]") for i in range(max(by_id) + 1)]
    else:
        raise ConversionError(
            f"no WordPiece vocabulary in {model_dir}: vocab.txt is missing (download it with the model)"
        )
    if len(tokens) > vocab_size:
        raise ConversionError(
            f"{vocab_file} has {len(tokens)} tokens but config.json says vocab_size={vocab_size}: "
            "the vocabulary does not belong to these weights"
        )
    # the embedding matrix may be padded beyond the vocabulary; llama.cpp needs one entry per row
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]
    return tokens


def _normalizer(tok_config: dict[str, Any], tok_json: dict[str, Any]) -> tuple[bool, bool]:
    normalizer = tok_json.get("normalizer") or {}
    lowercase = tok_config.get("do_lower_case", normalizer.get("lowercase", True))
    strip = tok_config.get("strip_accents", normalizer.get("strip_accents"))
    return bool(lowercase), bool(lowercase if strip is None else strip)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _load_tensors(model_dir: Path) -> dict[str, np.ndarray]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        hint = " (pytorch_model.bin is not supported: save the model with safe_serialization=True)"
        has_bin = (model_dir / "pytorch_model.bin").exists()
        raise ConversionError(f"no model.safetensors in {model_dir}" + (hint if has_bin else ""))
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        tensors.update(_read_safetensors(file))
    return tensors


def _read_safetensors(file: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    try:
        return load_file(str(file))
    except Exception as exc:  # bf16 has no numpy dtype; safetensors.numpy refuses it
        if "bf16" not in str(exc).lower() and "bfloat16" not in str(exc).lower():
            raise ConversionError(f"cannot read {file}: {exc}") from exc
    return _read_safetensors_bf16(file)


def _read_safetensors_bf16(file: Path) -> dict[str, np.ndarray]:
    """Minimal safetensors reader for files with bfloat16 tensors (widened to float32)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "BF16": np.uint16}
    with open(file, "rb") as fh:
        header_len = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(header_len))
        body = fh.read()
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = np.frombuffer(body[start:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        out[name] = (raw.astype(np.uint32) << 16).view(np.float32) if info["dtype"] == "BF16" else raw
    return out


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ConversionError(f"missing {path}: need {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConversionError(f"cannot read {path}: {exc}") from exc


def _read_json_optional(path: Path) -> dict[str, Any]:
    data = _read_json(path, path.name) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


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
