"""memorySearch.store: backend, url (or MDMEMORY_PG_URL) and schema; errors name the key and the fix and
never show the URL's password."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config
from mdmem.util.errors import ConfigError

SECRET = "pa55-w0rd-9931"


def config(tmp_path: Path, store: dict[str, Any], agent_store: dict[str, Any] | None = None) -> Path:
    entry: dict[str, Any] = {"id": "main"}
    if agent_store is not None:
        entry["memorySearch"] = {"store": agent_store}
    path = tmp_path / "config.json5"
    body = {"agents": {"defaults": {"workspace": str(tmp_path), "memorySearch": {"store": store}}, "list": [entry]}}
    path.write_text(json.dumps(body))
    return path


def test_sqlite_is_the_default_and_postgres_takes_its_url_from_the_file_or_the_environment(tmp_path: Path) -> None:
    store = load_config(config(tmp_path, {}), env={}).agent().memory_search.store
    assert (store.backend, store.url, store.schema) == ("sqlite", None, "mdmemory")
    url = f"postgresql://app:{SECRET}@db:5432/mem"
    store = load_config(config(tmp_path, {"backend": "postgres", "url": url}), env={}).agent().memory_search.store
    assert (store.backend, store.url) == ("postgres", url)
    env = {"MDMEMORY_PG_URL": url}
    agent = load_config(config(tmp_path, {}, {"backend": "postgres", "schema": "team_a"}), env=env).agent()
    assert (agent.memory_search.store.url, agent.memory_search.store.schema) == (url, "team_a")
    assert SECRET not in repr(agent)


@pytest.mark.parametrize(
    ("store", "agent_store", "env", "key", "fix"),
    [
        ({"backend": "postgress"}, None, {}, "agents.defaults.memorySearch.store.backend", '"postgres"'),
        ({"backend": "postgres"}, None, {}, "agents.defaults.memorySearch.store.url", "MDMEMORY_PG_URL"),
        ({}, {"backend": "postgres"}, {}, "agents.list[0].memorySearch.store.url", "set store.url"),
        (
            {"backend": "postgres", "url": f"mysql://app:{SECRET}@db/mem"},
            None,
            {},
            "agents.defaults.memorySearch.store.url",
            "postgresql://user:password@host",
        ),
        (
            {"backend": "postgres"},
            None,
            {"MDMEMORY_PG_URL": f"db.example:{SECRET}"},
            "agents.defaults.memorySearch.store.url",
            "from MDMEMORY_PG_URL",
        ),
        ({"schema": "Team-A"}, None, {}, "agents.defaults.memorySearch.store.schema", "lower-case letters"),
        ({"url": 5}, None, {}, "agents.defaults.memorySearch.store.url", "a string or null"),
    ],
)
def test_bad_store_settings_name_the_key_and_the_fix_and_hide_the_password(
    tmp_path: Path, store: dict[str, Any], agent_store: dict[str, Any] | None, env: dict[str, str], key: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(config(tmp_path, store, agent_store), env=env)
    message = str(failed.value)
    assert failed.value.key == key and f"{key}:" in message and "Fix:" in message and fix in message, message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ("select", "reserved word"),
        ("user", "reserved word"),
        ("current_user", "reserved word"),
        ("table", "reserved word"),
        ("authorization", "reserved word"),  # reserved, though it may name a function
        ("information_schema", "system schema"),
        ("pg_catalog", "system schema"),
        ("pg_temp", "system schema"),
        ("pg_mdmemory", "system schema"),  # PostgreSQL refuses every pg_ name
        ("public", "every database's default schema"),
        ("Team-A", "lower-case letters"),
        ("9lives", "not starting with a digit"),
        ("a" * 64, "at most 63"),
        ("x; DROP SCHEMA y", "plain PostgreSQL name"),
    ],
)
def test_schema_names_that_are_not_mdmemorys_own_plain_names_are_refused(tmp_path: Path, schema: str, why: str) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(config(tmp_path, {"backend": "postgres", "url": "postgresql://db/mem", "schema": schema}))
    message = str(failed.value)
    key = "agents.defaults.memorySearch.store.schema"
    assert failed.value.key == key and f"{key}:" in message and why in message, message
    assert "Fix: " in message and '"mdmemory"' in message, message


@pytest.mark.parametrize("schema", ["mdmemory", "team_a", "_memory", "users", "int", "between", "a" * 63])
def test_plain_names_are_accepted(tmp_path: Path, schema: str) -> None:
    agent = load_config(config(tmp_path, {"schema": schema})).agent()
    assert agent.memory_search.store.schema == schema


def test_the_reserved_words_are_postgresqls(pg_url: str) -> None:
    """The list the configuration checks is exactly the server's keywords that cannot name a schema; the
    other keywords can (mdmem's own migrations run in a schema named by one: ``between``)."""
    import psycopg

    from mdmem.config.store import RESERVED_WORDS
    from mdmem.store.pg.schema import SCHEMA_VERSION, migrate

    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT word, catcode FROM pg_get_keywords()").fetchall()
        assert {w for w, code in rows if code in ("R", "T")} == RESERVED_WORDS
        for word in sorted(RESERVED_WORDS)[:5]:
            with pytest.raises(psycopg.errors.SyntaxError):
                conn.execute(f"CREATE SCHEMA {word}")
        try:
            assert migrate(conn, "between") == SCHEMA_VERSION
        finally:
            conn.execute("DROP SCHEMA IF EXISTS between CASCADE")
