"""Embedding providers: one abstract ``embed_batch``; batching, truncation, retries live in the base.

``EmbeddingProvider`` and ``RetryPolicy`` are imported on first use (PEP 562): a command that only needs
``mdmem.providers.deadline`` (every ``Memory``) does not pay for the base and its circuit breaker.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mdmem.providers.base import EmbeddingProvider, RetryPolicy

__all__ = ["EmbeddingProvider", "RetryPolicy"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mdmem.providers import base

        return getattr(base, name)
    raise AttributeError(f"module 'mdmem.providers' has no attribute {name!r}")
