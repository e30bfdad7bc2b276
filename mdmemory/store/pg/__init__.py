"""The PostgreSQL + pgvector store (``store.backend: "postgres"``): every agent in one database.

Work in progress (issue 13): the schema, FTS5-identical keyword postings with BM25 computed in SQL, and the
connection rules are here; the store interface the indexer and search use is not wired to it yet.
"""
