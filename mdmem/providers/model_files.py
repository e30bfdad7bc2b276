"""GGUF model files for the local provider: paths and ``hf:`` URIs, downloads, the GGUF header.

The model is a file path or ``hf:owner/repo/file.gguf`` (resolved in a Hugging Face cache folder; downloaded
only when allowed, or by ``pull_model``).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from mdmem.providers.native import INSTALL_HINT
from mdmem.util.errors import ProviderError

HF_PREFIX = "hf:"


def parse_hf_uri(uri: str) -> tuple[str, str]:
    """Split ``hf:owner/repo/path/file.gguf`` into (``owner/repo``, ``path/file.gguf``)."""
    parts = uri[len(HF_PREFIX) :].strip("/").split("/")
    if not uri.startswith(HF_PREFIX) or len(parts) < 3 or not all(parts):
        raise ProviderError(f"bad model URI {uri!r}: expected hf:owner/repo/file.gguf")
    return "/".join(parts[:2]), "/".join(parts[2:])


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise ProviderError(
            f"hf: model URIs need huggingface_hub, which is not installed here ({_cause(exc)}): {INSTALL_HINT}, "
            "or only it: pip install huggingface-hub"
        ) from exc
    return huggingface_hub


def resolve_model_path(model_path: str, cache_dir: Path, allow_download: bool = False) -> Path:
    """Local file for ``model_path`` (a path or ``hf:`` URI). Downloads only when ``allow_download``."""
    if not model_path.startswith(HF_PREFIX):
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise ProviderError(
                f"local embedding model file {path} does not exist: check the path, or set "
                "memorySearch.local.modelPath to an existing .gguf file (`mdmem model convert SRC OUT` makes "
                "one from a sentence-transformers folder) or to hf:owner/repo/file.gguf"
            )
        return path
    repo_id, filename = parse_hf_uri(model_path)
    hub = _hub()  # not installed: its own error, with the install command
    try:
        found = hub.hf_hub_download(repo_id, filename, cache_dir=str(cache_dir), local_files_only=not allow_download)
    except Exception as exc:  # offline, not cached, 404, network: all mean "no file"
        how = "the download failed" if allow_download else "it is not in the cache and downloads are off"
        raise ProviderError(
            f"model {model_path} is not available ({how}: {_cause(exc)}). Cache folder: {cache_dir}. "
            f"Run `mdmem model pull {model_path}` while online, or download {filename} from "
            f"https://huggingface.co/{repo_id} yourself and set memorySearch.local.modelPath to that file"
        ) from exc
    return Path(found)


def is_model_available(model_path: str, cache_dir: Path) -> bool:
    """True when the model file is on disk already (never downloads); for provider auto-selection."""
    if not model_path.startswith(HF_PREFIX):
        return Path(model_path).expanduser().is_file()
    try:
        repo_id, filename = parse_hf_uri(model_path)
        found = _hub().try_to_load_from_cache(repo_id, filename, cache_dir=str(cache_dir))
    except ProviderError:
        return False
    return isinstance(found, str) and Path(found).is_file()


def _cause(exc: BaseException) -> str:
    """An exception as one line for a message: its type and the first line of what it says."""
    said = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {said[0][:300]}" if said else "")


def pull_model(uri: str, cache_dir: Path) -> tuple[Path, bool]:
    """The model file for ``uri`` and whether it was there already: a local GGUF file that exists, or an
    ``hf:`` model in ``cache_dir``; else an ``hf:`` model is downloaded into ``cache_dir`` with a progress bar.
    Raises ``ProviderError`` saying why not (a missing local file, not a GGUF file, no huggingface_hub, the
    download's own error)."""
    if not uri.startswith(HF_PREFIX):
        path = resolve_model_path(uri, cache_dir)  # a missing file: the message says how to get one
        read_gguf_header(path)  # and one that is not a model says so
        return path, True
    if is_model_available(uri, cache_dir):
        return resolve_model_path(uri, cache_dir), True
    return resolve_model_path(uri, cache_dir, allow_download=True), False


_GGUF_SCALAR = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


def read_gguf_header(path: Path) -> dict[str, Any]:
    """Scalar and string metadata of a GGUF file, up to the tokenizer arrays (cheap; no tensors read).

    Raises ``ProviderError`` when the file is not a GGUF file.
    """

    def read(fmt: str) -> Any:
        size = struct.calcsize(fmt)
        raw = fh.read(size)
        if len(raw) != size:
            raise ProviderError(f"{path} is truncated: download or convert the model again")
        return struct.unpack(fmt, raw)[0]

    def read_str() -> str:
        return fh.read(read("<Q")).decode("utf-8", errors="replace")

    meta: dict[str, Any] = {}
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF" or read("<I") < 2:
                raise ProviderError(
                    f"{path} is not a GGUF model file (v2+): point memorySearch.local.modelPath at a .gguf file, "
                    "or make one from a sentence-transformers folder with `mdmem model convert SRC OUT`"
                )
            read("<Q")  # tensor count
            for _ in range(read("<Q")):
                key, vtype = read_str(), read("<I")
                if key.startswith("tokenizer.") or vtype == 9:  # arrays (vocabularies) come last: stop
                    break
                meta[key] = read_str() if vtype == 8 else read(_GGUF_SCALAR[vtype])
    except OSError as exc:
        raise ProviderError(f"cannot read model file {path}: {exc}") from exc
    except KeyError as exc:
        raise ProviderError(f"{path} has unknown GGUF metadata: is the file corrupt?") from exc
    return meta
