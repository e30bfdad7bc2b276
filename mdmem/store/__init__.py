"""The index stores. ``api.IndexStore`` is what the rest of mdmem uses; ``open.open_store`` gives the
configured one: the SQLite ``Store`` (here: connection factory with sqlite-vec, migrations, vector codec,
index queries, generation files) or ``pg.PgStore`` (PostgreSQL + pgvector).

The names below are imported on first use (PEP 562), so that importing a light submodule (``faults``,
``health``) does not open SQLite: ``mdmem get`` never touches the index.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mdmem.store.connection import connect, transaction
    from mdmem.store.index import Store
    from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow
    from mdmem.store.vectors import decode_vector, encode_vector

_HOMES = {
    "connect": "connection",
    "transaction": "connection",
    "ChunkRow": "rows",
    "ChunkVectors": "rows",
    "FileRow": "rows",
    "Store": "index",
    "decode_vector": "vectors",
    "encode_vector": "vectors",
}

__all__ = ["ChunkRow", "ChunkVectors", "FileRow", "Store", "connect", "decode_vector", "encode_vector", "transaction"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mdmem.store' has no attribute {name!r}")
    return getattr(import_module(f"mdmem.store.{home}"), name)
