"""The one vector codec: float32, little-endian, as sqlite-vec stores it.

numpy is imported where a vector is first handled, not with this module: a keyword-only command (the CLI
without a provider) opens the store without ever paying for numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_DTYPE = "<f4"


def encode_vector(vector: Sequence[float] | np.ndarray) -> bytes:
    """Encode a vector as little-endian float32 bytes."""
    import numpy as np

    return np.asarray(vector, dtype=_DTYPE).tobytes()


def decode_vector(blob: bytes) -> np.ndarray:
    """Decode bytes written by ``encode_vector`` back into a float32 array."""
    import numpy as np

    return np.frombuffer(blob, dtype=_DTYPE).astype(np.float32)


def cosine_similarities(blobs: Sequence[bytes], query: Sequence[float] | np.ndarray) -> np.ndarray:
    """The cosine similarity of ``query`` to each encoded vector in ``blobs`` (all of one dimension)."""
    import numpy as np

    matrix = np.frombuffer(b"".join(blobs), dtype=_DTYPE).reshape(len(blobs), -1)
    q = np.asarray(query, dtype=np.float32)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    return matrix @ q / np.maximum(np.linalg.norm(matrix, axis=1), 1e-12)
