"""Build the configured embedding provider: explicit choice, ``auto`` selection, creation fallback."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mdmem.config.load import DEFAULT_REMOTE_MODEL, MemorySearchConfig
from mdmem.providers.base import EmbeddingProvider
from mdmem.util.errors import ProviderError

ENABLE_VECTORS_HINT = (
    "vectors are off (keyword-only search): run `mdmem model pull` (needs `pip install 'mdmem[local]'`) "
    "to use the local model, or set OPENAI_API_KEY / memorySearch.remote.apiKey"
)


@dataclass(frozen=True)
class ProviderChoice:
    """The provider in use and why. ``provider`` is None for keyword-only search."""

    provider: EmbeddingProvider | None
    requested: str
    fallback: dict[str, str] | None = None  # {"from": ..., "reason": ...} when the fallback took over
    hint: str | None = None

    @property
    def name(self) -> str:
        return self.provider.id if self.provider else "none"


def model_cache_dir(settings: MemorySearchConfig, home: Path) -> Path:
    return Path(settings.local.model_cache_dir).expanduser() if settings.local.model_cache_dir else home / "models"


def _api_key(settings: MemorySearchConfig, env: Mapping[str, str]) -> str | None:
    return settings.remote.api_key or env.get("OPENAI_API_KEY") or None


def local_model_on_disk(settings: MemorySearchConfig, home: Path) -> bool:
    """True when the local extra is installed and the model file is present (never downloads)."""
    from mdmem.providers import native, xllama

    if not (native.available() or xllama.available()):
        return False
    try:
        from mdmem.providers.model_files import is_model_available
    except ImportError:
        return False
    return is_model_available(settings.local.model_path, model_cache_dir(settings, home))


def build(
    name: str, settings: MemorySearchConfig, home: Path, env: Mapping[str, str], model: str | None = None
) -> EmbeddingProvider | None:
    """Create provider ``name`` (not ``auto``); raise ProviderError when it cannot be created.

    ``model`` is ``memorySearch.model`` for the primary provider only: a fallback uses its own default
    (``local.modelPath`` or the remote default model), never the primary's model name.
    """
    if name == "none":
        return None
    if name == "hash":
        from mdmem.providers.hashing import HashEmbeddingProvider

        return HashEmbeddingProvider(dims=settings.remote.dimensions or 384)
    if name == "local":
        try:
            from mdmem.providers.local import LocalEmbeddingProvider, choose_binding
            from mdmem.providers.model_files import is_model_available, resolve_model_path
        except ImportError as exc:
            raise ProviderError(f"local provider unavailable ({exc}). Fix: pip install 'mdmem[local]'") from exc
        binding = choose_binding()  # raises when no llama.cpp binding is installed: keyword-only, like no model
        model_path = model or settings.local.model_path
        if not is_model_available(model_path, model_cache_dir(settings, home)):
            if model_path.startswith("hf:"):
                raise ProviderError(
                    f"local embedding model {model_path} is not on disk (cache {model_cache_dir(settings, home)}): "
                    f"run `mdmem model pull {model_path}` or set memorySearch.local.modelPath to a .gguf file"
                )
            resolve_model_path(model_path, model_cache_dir(settings, home))  # raises: the file is missing
        return LocalEmbeddingProvider(
            model_path=model_path,
            cache_dir=model_cache_dir(settings, home),
            threads=settings.local.threads,
            context_size=settings.local.context_size,
            query_prefix=settings.local.query_prefix,
            document_prefix=settings.local.document_prefix,
            binding=binding,
        )
    if name == "openai":
        try:
            from mdmem.providers.remote import OpenAIEmbeddingProvider
        except ImportError as exc:
            raise ProviderError(f"openai provider unavailable ({exc}): pip install 'mdmem[remote]'") from exc
        return OpenAIEmbeddingProvider(
            model=model or DEFAULT_REMOTE_MODEL,
            base_url=settings.remote.base_url,
            api_key=settings.remote.api_key,
            headers=dict(settings.remote.headers),
            dimensions=settings.remote.dimensions,
            timeout=settings.remote.timeout_seconds,
            max_retries=settings.remote.max_retries,
            env=env,
        )
    raise ProviderError(f"unknown provider {name!r}: use auto, local, openai, hash or none")


def choose(settings: MemorySearchConfig, home: Path, env: Mapping[str, str] | None = None) -> ProviderChoice:
    """Resolve ``settings.provider`` (including ``auto``) and apply the creation fallback."""
    env = os.environ if env is None else env
    requested = settings.provider if settings.enabled else "none"
    name = requested
    if requested == "auto":
        if local_model_on_disk(settings, home):
            name = "local"
        elif _api_key(settings, env) or settings.remote.base_url:
            name = "openai"
        else:
            return ProviderChoice(None, requested, hint=ENABLE_VECTORS_HINT)
    try:
        return ProviderChoice(build(name, settings, home, env, settings.model), requested)
    except ProviderError as exc:
        if settings.fallback == "none" or settings.fallback == name:
            raise
        reason = str(exc)
    provider = build(settings.fallback, settings, home, env)
    return ProviderChoice(provider, requested, fallback={"from": name, "reason": reason})
