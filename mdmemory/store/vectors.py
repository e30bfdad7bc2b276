"""The one vector codec: float32, little-endian, as sqlite-vec stores it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_DTYPE = np.dtype("<f4")


def encode_vector(vector: Sequence[float] | np.ndarray) -> bytes:
    """Encode a vector as little-endian float32 bytes."""
    return np.asarray(vector, dtype=_DTYPE).tobytes()


def decode_vector(blob: bytes) -> np.ndarray:
    """Decode bytes written by ``encode_vector`` back into a float32 array."""
    return np.frombuffer(blob, dtype=_DTYPE).astype(np.float32)
