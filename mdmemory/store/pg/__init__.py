"""The PostgreSQL + pgvector store: every agent in one database (issue 13, in progress).

Here: the schema and its migrations, FTS5-identical keyword postings with BM25 computed in SQL, HNSW vector
search per agent generation, one agent's index (``PgStore``: files, generations, the writer lock) and the
copy of an SQLite index. ``mdmemory.search`` runs on a ``PgStore`` as on the SQLite store; the indexer,
``Memory``, status and the service do not use it yet, and the configuration cannot select it.
"""
