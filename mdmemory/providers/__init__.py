"""Embedding providers: one abstract ``embed_batch``; batching, truncation, retries live in the base.

``EmbeddingProvider`` and ``RetryPolicy`` are imported on first use (PEP 562): a command that only needs
``mdmemory.providers.deadline`` (every ``Memory``) does not pay for the base and its circuit breaker.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mdmemory.providers.base import EmbeddingProvider, RetryPolicy

__all__ = ["EmbeddingProvider", "RetryPolicy"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mdmemory.providers import base

        return getattr(base, name)
    raise AttributeError(f"module 'mdmemory.providers' has no attribute {name!r}")
