"""A deterministic feature-hashing provider (``provider: "hash"``).

No model, no network: each word and CJK bigram is hashed into a fixed number of signed buckets. Vectors
are stable across processes and machines, so tests and benchmarks can check exact behaviour. It captures
word overlap only, not meaning: use ``local`` or ``openai`` for real semantic search.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from mdmem.providers.base import EmbeddingProvider
from mdmem.util.tokens import CJK_RUN

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbeddingProvider(EmbeddingProvider):
    """Feature-hashing embeddings; ``calls`` and ``embedded`` count work done (handy in tests)."""

    id = "hash"

    def __init__(self, dims: int = 384, model: str = "feature-hash-v1") -> None:
        self.dims = dims
        self.model = model
        self.max_input_tokens = 8192
        self.max_batch_size = 256
        self.calls = 0
        self.embedded = 0

    def identity(self) -> dict[str, object]:
        return {"dims": self.dims}

    def _features(self, text: str) -> list[str]:
        lowered = text.lower()
        feats = [w for w in _WORD.findall(CJK_RUN.sub(" ", lowered))]
        for run in CJK_RUN.findall(lowered):
            feats.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
        return feats

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.embedded += len(texts)
        assert self.dims is not None
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self.dims] += 1.0 if (value >> 63) & 1 else -1.0
            if not out[row].any():
                out[row, 0] = 1.0  # empty or symbol-only text still gets a valid unit vector
        return out
