"""Reading a sentence-transformers BERT-family folder (config, tokenizer, pooling, safetensors weights) into
what a GGUF of it needs (mdmem.providers.bert_to_gguf writes it). Needs ``safetensors`` and ``numpy``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mdmem.util.errors import MdMemoryError

_GELU_ACTS = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"}


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
