"""The index stores. ``api.IndexStore`` is what the rest of mdmemory uses; ``open.open_store`` gives the
configured one: the SQLite ``Store`` (here: connection factory with sqlite-vec, migrations, vector codec,
index queries, generation files) or ``pg.PgStore`` (PostgreSQL + pgvector)."""

from mdmemory.store.connection import connect, transaction
from mdmemory.store.index import ChunkRow, ChunkVectors, FileRow, Store
from mdmemory.store.vectors import decode_vector, encode_vector

__all__ = ["ChunkRow", "ChunkVectors", "FileRow", "Store", "connect", "decode_vector", "encode_vector", "transaction"]
