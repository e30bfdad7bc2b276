"""memorySearch.store: backend, url (or MDMEMORY_PG_URL) and schema; errors name the key and the fix and
never show the URL's password."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mdmemory.config import load_config
from mdmemory.errors import ConfigError

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
