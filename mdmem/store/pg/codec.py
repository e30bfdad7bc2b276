"""pgvector's binary form of a vector, both ways: what the store sends and what it reads back.

A vector goes to the server as pgvector's binary wire format (``vector_recv``: dimension and a reserved
word as big-endian int16, then big-endian float32s), not as the text ``[0.1,...]``: formatting 384 floats
as text cost more client time than the rest of a sync's writes, and parsing them more server time. It comes
back through ``vector_send(embedding)``, the same format as ``bytea``. SQLite's little-endian BLOBs are
``mdmem.store.vectors``; this is PostgreSQL's wire format only.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

_HEADER = struct.Struct(">HH")
_registered = threading.Lock()
_done = False


class Vector:
    """A vector as a query parameter (``%s::vector``), sent in pgvector's binary format."""

    __slots__ = ("data",)

    def __init__(self, values: np.ndarray | Sequence[float]) -> None:
        import numpy as np

        self.data = np.asarray(values, dtype=">f4").ravel()


def register() -> None:
    """Teach psycopg (once per process, before its first connection: a connection copies the adapters it
    starts with) to send ``Vector`` in binary; the server infers the type from the ``::vector`` cast that
    follows every such parameter."""
    global _done
    if _done:
        return
    with _registered:
        if _done:
            return
        import psycopg
        from psycopg.adapt import Dumper
        from psycopg.pq import Format

        class VectorDumper(Dumper):
            format = Format.BINARY

            def dump(self, obj: Any) -> bytes:
                return _HEADER.pack(len(obj.data), 0) + obj.data.tobytes()

        psycopg.adapters.register_dumper(Vector, VectorDumper)
        _done = True


def param(values: np.ndarray | Sequence[float]) -> Vector:
    """``values`` as a parameter of a statement that casts it: ``%s::vector``."""
    return Vector(values)


def array(blob: bytes | memoryview) -> np.ndarray:
    """A vector from ``vector_send(embedding)``, as native float32."""
    import numpy as np

    dims, _ = _HEADER.unpack_from(blob)
    return np.frombuffer(blob, dtype=">f4", count=dims, offset=_HEADER.size).astype(np.float32)


def literal(vector: np.ndarray | Sequence[float]) -> str:
    """pgvector's text form of a vector (for statements built with ``psycopg.sql.Literal``)."""
    import numpy as np

    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"
