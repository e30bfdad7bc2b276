"""The PostgreSQL + pgvector store: every agent in one database (``memorySearch.store.backend: "postgres"``).

``store`` (``PgStore``: one agent's index, its generations, the writer lock), ``indexing`` (pending chunks,
vectors, the embedding cache), ``searching`` (what ``mdmem.search.hybrid`` asks), ``keyword`` (FTS5-identical
postings, BM25 in SQL), ``vectors`` (HNSW per agent generation), ``schema`` (numbered migrations),
``connection`` (pooled connections, the URL never shown with its password). ``PgStore`` implements
``mdmem.store.api.IndexStore``, as the SQLite ``Store`` does; ``mdmem.store.open`` picks one.
"""
