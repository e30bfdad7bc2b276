"""Embedding providers: one abstract ``embed_batch``; batching, truncation, retries live in the base."""

from mdmemory.providers.base import EmbeddingProvider, RetryPolicy

__all__ = ["EmbeddingProvider", "RetryPolicy"]
