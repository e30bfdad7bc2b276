"""SQLite store: connection factory (sqlite-vec), migrations, vector codec, index queries."""

from mdmemory.store.connection import connect, transaction
from mdmemory.store.index import ChunkRow, ChunkVectors, FileRow, Store
from mdmemory.store.vectors import decode_vector, encode_vector

__all__ = ["ChunkRow", "ChunkVectors", "FileRow", "Store", "connect", "decode_vector", "encode_vector", "transaction"]
