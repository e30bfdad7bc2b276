"""Tests for the configuration loader: defaults, merging, paths, environment and every error class."""

from __future__ import annotations

import json
import re
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any, get_args, get_type_hints

import json5
import pytest

from mdmem.config.load import (
    AgentConfig,
    ChunkingConfig,
    Config,
    HybridConfig,
    MemorySearchConfig,
    QueryConfig,
    RemoteConfig,
    ServiceConfig,
    camel,
    load_config,
)
from mdmem.config.validation import RANGES
from mdmem.util.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.json5"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fake user home; ``~`` expands to it through the env dict."""
    path = tmp_path / "user"
    path.mkdir()
    return path


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return {"HOME": str(home)}


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def write(tmp_path: Path, data: Any, name: str = "config.json5") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def ms(section: dict[str, Any]) -> dict[str, Any]:
    """A config whose agents.defaults.memorySearch is ``section``."""
    return {"agents": {"defaults": {"memorySearch": section}}}


def error(tmp_path: Path, env: dict[str, str], data: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data), env)
    return info.value


def leaf_paths(cls: type, prefix: str = "") -> list[str]:
    """camelCase dotted paths of every non-dataclass field under ``cls``."""
    out: list[str] = []
    hints = get_type_hints(cls)
    for f in fields(cls):
        key = f"{prefix}{camel(f.name)}"
        args = get_args(hints[f.name])
        if is_dataclass(hints[f.name]):
            out += leaf_paths(hints[f.name], key + ".")
        elif len(args) == 2 and args[1] is Ellipsis and is_dataclass(args[0]):  # a list of objects: its items' keys
            out += leaf_paths(args[0], key + "[].")
        else:
            out.append(key)
    return out


def nested(path: str, value: Any) -> dict[str, Any]:
    for key in reversed(path.split(".")):
        value = {key: value}
    return value


# -- defaults, files and environment ----------------------------------------------------------------


def test_defaults_without_file(home: Path, env: dict[str, str]) -> None:
    state = home / ".mdmemory"
    main = AgentConfig(
        id="main",
        workspace=home / "clawd",
        store_path=state / "state/memory/main.sqlite",
        memory_search=MemorySearchConfig(),
        default=True,
        home=state,
    )
    assert load_config(env=env) == Config(home=state, source=None, agents=(main,))


def test_mdmemory_home_and_its_config_file(tmp_path: Path, env: dict[str, str]) -> None:
    state = tmp_path / "state-home"
    state.mkdir()
    source = write(state, {"agents": {"defaults": {"workspace": "ws"}}})
    cfg = load_config(env={**env, "MDMEMORY_HOME": str(state)})
    assert (cfg.home, cfg.source) == (state, source)
    assert cfg.agent().workspace == state / "ws"
    assert cfg.agent().store_path == state / "state/memory/main.sqlite"


def test_mdmemory_config_env_and_path_argument_precedence(tmp_path: Path, env: dict[str, str]) -> None:
    by_env = write(tmp_path, ms({"query": {"maxResults": 7}}), "env.json5")
    by_arg = write(tmp_path, ms({"query": {"maxResults": 9}}), "arg.json5")
    env = {**env, "MDMEMORY_CONFIG": str(by_env)}
    assert load_config(env=env).agent().memory_search.query.max_results == 7
    assert load_config(by_arg, env).agent().memory_search.query.max_results == 9


@pytest.mark.parametrize("via", ["argument", "env"])
def test_explicit_config_file_must_exist(tmp_path: Path, env: dict[str, str], via: str) -> None:
    missing = tmp_path / "nope.json5"
    with pytest.raises(ConfigError) as info:
        if via == "argument":
            load_config(missing, env)
        else:
            load_config(env={**env, "MDMEMORY_CONFIG": str(missing)})
    message = str(info.value)
    assert str(missing) in message and "not found" in message and "Fix:" in message
    assert ("MDMEMORY_CONFIG" in message) == (via == "env")


def test_workspace_env_overrides_defaults_only(tmp_path: Path, env: dict[str, str]) -> None:
    data = {"agents": {"defaults": {"workspace": "a"}, "list": [{"id": "x"}, {"id": "y", "workspace": "b"}]}}
    cfg = load_config(write(tmp_path, data), {**env, "MDMEMORY_WORKSPACE": "~/from-env"})
    assert cfg.agent("x").workspace == Path(env["HOME"]) / "from-env"
    assert cfg.agent("y").workspace == tmp_path / "b"


def test_relative_workspace_without_file_is_relative_to_cwd(env: dict[str, str]) -> None:
    cfg = load_config(env={**env, "MDMEMORY_WORKSPACE": "notes"})
    assert cfg.agent().workspace == Path.cwd() / "notes"


def test_store_path_tokens_and_relative_paths(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    data = {
        "agents": {
            "defaults": {"memorySearch": {"store": {"path": "idx/{agentId}.db"}}},
            "list": [
                {"id": "a"},
                {"id": "b", "memorySearch": {"store": {"path": "{home}/x/{agentId}-{agentId}.db"}}},
                {"id": "c", "memorySearch": {"store": {"path": "~/elsewhere/{agentId}.db"}}},
            ],
        }
    }
    cfg = load_config(write(tmp_path, data), {**env, "MDMEMORY_HOME": str(tmp_path / "mh")})
    paths = [a.store_path for a in cfg.agents]
    assert paths == [tmp_path / "mh/idx/a.db", tmp_path / "mh/x/b-b.db", home / "elsewhere/c.db"]


def test_model_cache_dir_expands_tilde_and_keeps_none(tmp_path: Path, env: dict[str, str], home: Path) -> None:
    assert load_config(env=env).agent().memory_search.local.model_cache_dir is None
    cfg = load_config(write(tmp_path, ms({"local": {"modelCacheDir": "~/models"}})), env)
    assert cfg.agent().memory_search.local.model_cache_dir == str(home / "models")


# -- merging and agents -----------------------------------------------------------------------------


def test_list_entries_merge_over_defaults(tmp_path: Path, env: dict[str, str]) -> None:
    data = {
        "agents": {
            "defaults": {
                "workspace": "ws",
                "memorySearch": {
                    "extraPaths": ["notes", "shared", "notes"],
                    "remote": {"baseUrl": "http://x", "headers": {"A": "1"}},
                    "query": {"maxResults": 8, "hybrid": {"fusion": "rrf", "rrfK": 30}},
                },
            },
            "list": [
                {"id": "plain"},
                {
                    "id": "work",
                    "workspace": "/abs/work",
                    "memorySearch": {
                        "extraPaths": ["shared", "/tmp/more"],
                        "remote": {"headers": {"B": "2"}},
                        "query": {"hybrid": {"rrfK": 10}},
                        "chunking": {"tokens": 200},
                    },
                },
            ],
        }
    }
    cfg = load_config(write(tmp_path, data), env)
    plain, work = cfg.agents
    base = MemorySearchConfig(
        remote=RemoteConfig(base_url="http://x", headers={"A": "1"}),
        query=QueryConfig(max_results=8, hybrid=HybridConfig(fusion="rrf", rrf_k=30)),
    )
    ws = tmp_path / "ws"
    assert plain.memory_search == replace(base, extra_paths=(str(ws / "notes"), str(ws / "shared")))
    assert work.memory_search == replace(
        base,
        remote=RemoteConfig(base_url="http://x", headers={"A": "1", "B": "2"}),
        query=QueryConfig(max_results=8, hybrid=HybridConfig(fusion="rrf", rrf_k=10)),
        chunking=ChunkingConfig(tokens=200),
        extra_paths=("/abs/work/notes", "/abs/work/shared", "/tmp/more"),
    )
    assert (plain.workspace, work.workspace) == (ws, Path("/abs/work"))


def test_default_agent_is_flagged_one_else_first(tmp_path: Path, env: dict[str, str]) -> None:
    first = load_config(write(tmp_path, {"agents": {"list": [{"id": "a"}, {"id": "b"}]}}), env)
    assert [a.default for a in first.agents] == [True, False] and first.agent().id == "a"
    data = {"agents": {"list": [{"id": "a"}, {"id": "b", "default": True}]}}
    flagged = load_config(write(tmp_path, data), env)
    assert [a.default for a in flagged.agents] == [False, True]
    assert flagged.agent().id == "b" and flagged.agent("a").id == "a"


def test_empty_list_means_one_main_agent(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_config(write(tmp_path, {"agents": {"list": []}}), env)
    assert [a.id for a in cfg.agents] == ["main"]


def test_unknown_agent_id_lists_configured_ids(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_config(write(tmp_path, {"agents": {"list": [{"id": "a"}, {"id": "b"}]}}), env)
    with pytest.raises(ConfigError, match=r"unknown agent id 'zed'; configured agents: a, b\. Fix:"):
        cfg.agent("zed")


@pytest.mark.parametrize(
    ("vector", "text", "expected"),
    [
        (0.7, 0.3, (0.7, 0.3)),
        (2, 2, (0.5, 0.5)),
        (3, 1, (0.75, 0.25)),
        (0, 5, (0.0, 1.0)),
        (1e308, 1e308, (0.5, 0.5)),  # the sum overflows to infinity: both weights became 0
        (1e308, 0.3, (1.0, 0.0)),
        (5e-324, 5e-324, (0.5, 0.5)),  # the smallest subnormals
    ],
)
def test_hybrid_weights_are_normalised(
    tmp_path: Path, env: dict[str, str], vector: float, text: float, expected: tuple[float, float]
) -> None:
    cfg = load_config(write(tmp_path, ms({"query": {"hybrid": {"vectorWeight": vector, "textWeight": text}}})), env)
    hybrid = cfg.agent().memory_search.query.hybrid
    assert (hybrid.vector_weight, hybrid.text_weight) == pytest.approx(expected)


@pytest.mark.parametrize("key", ["vectorWeight", "textWeight", "query.minScore", "sync.intervalMinutes"])
@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_numbers_are_rejected_with_the_key(
    tmp_path: Path, env: dict[str, str], key: str, literal: str
) -> None:
    path = f"query.hybrid.{key}" if "." not in key else key
    text = json.dumps(ms(nested(path, 0))).replace(": 0}", f": {literal}}}", 1)
    err = error(tmp_path, env, text)
    assert err.key == f"agents.defaults.memorySearch.{path}"
    assert "expected a number" in str(err) and "infinity and NaN are not numbers here" in str(err)


def test_runtime_keys_are_ignored_and_recorded(tmp_path: Path, env: dict[str, str]) -> None:
    data = {
        "gateway": {"port": 18789},
        "channels": {},
        "agents": {
            "defaults": {"model": {"primary": "x"}, "workspace": "ws", "sandbox": {}},
            "list": [{"id": "main", "identity": {"name": "C"}, "tools": {}}],
        },
    }
    cfg = load_config(write(tmp_path, data), env)
    assert cfg.ignored_keys == (
        "gateway",
        "channels",
        "agents.defaults.model",
        "agents.defaults.sandbox",
        "agents.list[0].identity",
        "agents.list[0].tools",
    )


# -- errors -----------------------------------------------------------------------------------------


def test_unknown_memory_search_key_suggests_the_right_one(tmp_path: Path, env: dict[str, str]) -> None:
    data = {"agents": {"list": [{"id": "a"}, {"id": "b", "memorySearch": {"query": {"maxResult": 3}}}]}}
    err = error(tmp_path, env, data)
    assert err.key == "agents.list[1].memorySearch.query.maxResult"
    assert "agents.list[1].memorySearch.query.maxResult: unknown key; did you mean 'maxResults'?" in str(err)
    assert "Fix: rename it to 'maxResults'" in str(err)
    assert err.source == str(tmp_path / "config.json5") and str(err).startswith(err.source)


def test_unknown_memory_search_key_without_close_match(tmp_path: Path, env: dict[str, str]) -> None:
    message = str(error(tmp_path, env, ms({"chunking": {"zzzz": 1}})))
    assert "did you mean" not in message
    assert "Fix: remove it. Valid keys here: tokens, overlap, windowTokens, windowVectors." in message


@pytest.mark.parametrize(
    ("data", "key", "suggestion"),
    [
        ({"agent": {}}, "agent", "agents"),
        ({"agents": {"default": {}}}, "agents.default", "defaults"),
        ({"agents": {"defaults": {"memorysearch": {}}}}, "agents.defaults.memorysearch", "memorySearch"),
        ({"agents": {"defaults": {"memory_search": {}}}}, "agents.defaults.memory_search", "memorySearch"),
        ({"agents": {"list": [{"id": "a", "workspce": "x"}]}}, "agents.list[0].workspce", "workspace"),
    ],
)
def test_typo_of_our_key_at_agent_level_is_an_error(
    tmp_path: Path, env: dict[str, str], data: Any, key: str, suggestion: str
) -> None:
    err = error(tmp_path, env, data)
    assert err.key == key
    assert f"{key}: unknown key; did you mean '{suggestion}'? Fix: rename it to '{suggestion}'" in str(err)


@pytest.mark.parametrize(
    ("path", "value", "shown", "expected"),
    [
        ("chunking.tokens", "400", '"400"', "expected an integer"),
        ("chunking.tokens", True, "true", "expected an integer"),
        ("chunking.tokens", 400.5, "400.5", "expected an integer"),
        ("enabled", 1, "1", "expected true or false"),
        ("sync.watch", "yes", '"yes"', "expected true or false"),
        ("query.minScore", "0.5", '"0.5"', "expected a number"),
        ("query.minScore", False, "false", "expected a number"),
        ("model", 5, "5", "expected a string or null"),
        ("extraPaths", "notes", '"notes"', "expected a list of strings"),
        ("extraPaths", ["a", 1], '["a", 1]', "expected a list of strings"),
        ("remote", "http://x", "a string", "expected an object"),  # an object's place may hold secrets
        ("query.hybrid.fusion", 1, "1", 'expected one of "weighted", "rrf"'),
    ],
)
def test_wrong_type(tmp_path: Path, env: dict[str, str], path: str, value: Any, shown: str, expected: str) -> None:
    err = error(tmp_path, env, ms(nested(path, value)))
    key = f"agents.defaults.memorySearch.{path}"
    assert err.key == key
    assert f"{key}: {expected}" in str(err) and f"got {shown}" in str(err) and "Fix: " in str(err)


def test_wrong_type_message_names_the_default(tmp_path: Path, env: dict[str, str]) -> None:
    message = str(error(tmp_path, env, ms({"chunking": {"tokens": "400"}})))
    assert message.endswith('got "400". Fix: set it to an integer, or remove it to use the default (400).')


def test_ints_are_accepted_for_floats(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_config(write(tmp_path, ms({"query": {"minScore": 1}, "sync": {"intervalMinutes": 5}})), env)
    assert cfg.agent().memory_search.query.min_score == 1.0
    assert isinstance(cfg.agent().memory_search.sync.interval_minutes, float)


@pytest.mark.parametrize(
    ("path", "value", "bounds"),
    [
        ("chunking.tokens", 31, "from 32 to 8192"),
        ("chunking.tokens", 8193, "from 32 to 8192"),
        ("chunking.overlap", -1, "of at least 0"),
        ("query.maxResults", 0, "from 1 to 100"),
        ("query.maxResults", 101, "from 1 to 100"),
        ("query.minScore", 1.5, "from 0 to 1"),
        ("query.minScore", -0.1, "from 0 to 1"),
        ("query.hybrid.vectorWeight", -1, "of at least 0"),
        ("query.hybrid.candidateMultiplier", 51, "from 1 to 50"),
        ("query.hybrid.rrfK", 0, "of at least 1"),
        ("sync.watchDebounceMs", 600001, "from 0 to 600000"),
        ("sync.intervalMinutes", -1, "of at least 0"),
        ("cache.maxEntries", -1, "of at least 0"),
        ("maxFileBytes", 0, "of at least 1"),
        ("remote.timeoutSeconds", 0, "greater than 0 and at most 3600"),
        ("remote.timeoutSeconds", 1e308, "greater than 0 and at most 3600"),
        ("remote.maxRetries", 21, "from 0 to 20"),
        ("remote.dimensions", 0, "from 1 to 8192"),
        ("remote.dimensions", 8193, "from 1 to 8192"),
        ("local.threads", 0, "from 1 to 256"),
        ("local.threads", 100000, "from 1 to 256"),
        ("local.contextSize", 16, "from 32 to 1048576"),
        ("local.contextSize", 2**31, "from 32 to 1048576"),
        ("chunking.tokens", 0, "from 32 to 8192"),
        ("chunking.tokens", 10**9, "from 32 to 8192"),
        ("chunking.windowTokens", -1, "from 0 to 8192"),
    ],
)
def test_out_of_range(tmp_path: Path, env: dict[str, str], path: str, value: Any, bounds: str) -> None:
    data = {"agents": {"list": [{"id": "a"}, {"id": "b", "memorySearch": nested(path, value)}]}}
    err = error(tmp_path, env, data)
    key = f"agents.list[1].memorySearch.{path}"
    assert err.key == key
    assert f"{key}: expected " in str(err) and f"{bounds}, got {json.dumps(value)}." in str(err)
    assert f"Fix: set it to a value {bounds}, or remove it to use the default (" in str(err)


def test_overlap_must_be_below_tokens_and_blames_the_layer_that_set_it(tmp_path: Path, env: dict[str, str]) -> None:
    data = {"agents": {"list": [{"id": "a", "memorySearch": {"chunking": {"tokens": 64}}}]}}
    err = error(tmp_path, env, data)
    assert err.key == "agents.list[0].memorySearch.chunking.overlap"
    assert "expected an integer less than chunking.tokens (64), got 80. Fix:" in str(err)


def test_weights_must_not_both_be_zero(tmp_path: Path, env: dict[str, str]) -> None:
    err = error(tmp_path, env, ms({"query": {"hybrid": {"vectorWeight": 0, "textWeight": 0}}}))
    assert err.key == "agents.defaults.memorySearch.query.hybrid"
    assert "not both 0" in str(err) and '"vectorWeight": 0' in str(err) and "Fix: give" in str(err)


def test_bad_literal_choice_suggests_the_closest(tmp_path: Path, env: dict[str, str]) -> None:
    message = str(error(tmp_path, env, ms({"provider": "opanai"})))
    assert 'agents.defaults.memorySearch.provider: expected one of "auto", "local", "openai"' in message
    assert 'got "opanai" (did you mean "openai"?). Fix: set it to one of' in message
    assert 'remove it to use the default ("auto")' in message


def test_syntax_error_names_file_line_and_column(tmp_path: Path, env: dict[str, str]) -> None:
    err = error(tmp_path, env, "{\n  agents: {\n    defaults: ,\n  },\n}\n")
    assert str(err).startswith(str(tmp_path / "config.json5") + ": invalid JSON5 (line 3, column 15")
    assert err.key is None and "Fix:" in str(err)


def test_duplicate_keys_are_an_error(tmp_path: Path, env: dict[str, str]) -> None:
    message = str(error(tmp_path, env, "{agents: {}, agents: {}}"))
    assert 'Duplicate key "agents"' in message and "Fix: keep only one" in message


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ("[1, 2]", None, "the file must hold an object, got a list"),
        ({"agents": []}, "agents", "expected an object, got a list"),
        ({"agents": {"list": {"id": "a"}}}, "agents.list", "expected a list of agent objects, got an object"),
        ({"agents": {"list": ["main"]}}, "agents.list[0]", "expected an object, got a string"),
        ({"agents": {"defaults": {"memorySearch": None}}}, "agents.defaults.memorySearch", "got null"),
        ({"agents": {"defaults": {"workspace": 3}}}, "agents.defaults.workspace", "expected a string, got 3"),
        ({"agents": {"list": [{"id": "a", "default": "yes"}]}}, "agents.list[0].default", 'got "yes"'),
    ],
)
def test_wrong_shape(tmp_path: Path, env: dict[str, str], data: Any, key: str | None, fragment: str) -> None:
    err = error(tmp_path, env, data)
    assert err.key == key and fragment in str(err) and "Fix:" in str(err)


def test_two_default_agents(tmp_path: Path, env: dict[str, str]) -> None:
    data = {"agents": {"list": [{"id": "a", "default": True}, {"id": "b", "default": True}]}}
    err = error(tmp_path, env, data)
    assert err.key == "agents.list[1].default"
    assert "at most one agent with default: true, got true" in str(err)
    assert "agents.list[0] is already the default" in str(err)


def test_duplicate_agent_ids(tmp_path: Path, env: dict[str, str]) -> None:
    err = error(tmp_path, env, {"agents": {"list": [{"id": "a"}, {"id": "b"}, {"id": "a"}]}})
    assert err.key == "agents.list[2].id"
    assert 'a unique agent id, got "a". Fix: agents.list[0] already uses this id' in str(err)


@pytest.mark.parametrize("bad_id", ["a b", "../x", "", "é"])
def test_agent_id_must_be_file_name_safe(tmp_path: Path, env: dict[str, str], bad_id: str) -> None:
    err = error(tmp_path, env, {"agents": {"list": [{"id": bad_id}]}})
    assert err.key == "agents.list[0].id" and f"got {json.dumps(bad_id)}" in str(err)


def test_agent_id_is_required_in_a_list(tmp_path: Path, env: dict[str, str]) -> None:
    err = error(tmp_path, env, {"agents": {"list": [{"workspace": "x"}]}})
    assert err.key == "agents.list[0].id" and "missing" in str(err) and 'id: "main"' in str(err)


def test_store_path_errors(tmp_path: Path, env: dict[str, str]) -> None:
    err = error(tmp_path, env, ms({"store": {"path": "{agent}.db"}}))
    assert err.key == "agents.defaults.memorySearch.store.path" and 'got "{agent}.db"' in str(err)
    shared = {"agents": {"defaults": ms({"store": {"path": "/tmp/one.db"}})["agents"]["defaults"]}}
    shared["agents"]["list"] = [{"id": "a"}, {"id": "b"}]
    err = error(tmp_path, env, shared)
    assert "not shared with agent 'a'" in str(err) and "put {agentId} in the path" in str(err)


SECRET = "sk-very-secret-value"


@pytest.mark.parametrize(
    "section",
    [
        {"remote": {"apiKey": [SECRET]}},
        {"remote": {"headers": {"Authorization": f"Bearer {SECRET}", "X-Count": 3}}},
        {"remote": {"headers": SECRET}},
        {"remote": {"apikey": SECRET}},
        {"remote": {"apiKey": SECRET, "dimensions": 0}},
    ],
)
def test_secrets_never_appear_in_messages(tmp_path: Path, env: dict[str, str], section: Any) -> None:
    message = str(error(tmp_path, env, ms(section)))
    assert SECRET not in message and "agents.defaults.memorySearch.remote." in message


def test_secret_values_are_redacted(tmp_path: Path, env: dict[str, str]) -> None:
    message = str(error(tmp_path, env, ms({"remote": {"apiKey": 12345}})))
    assert "remote.apiKey: expected a string or null, got [REDACTED]. Fix:" in message
    assert "12345" not in message


PLAIN = "hunter2-plain-value"  # a secret no pattern recognises: only where it was put can tell


@pytest.mark.parametrize(
    ("data", "key"),
    [
        # wrong type of a secret field, and a secret next to another error
        (ms({"remote": {"apiKey": 12345}}), "agents.defaults.memorySearch.remote.apiKey"),
        (ms({"remote": {"apiKey": {"value": PLAIN}}}), "agents.defaults.memorySearch.remote.apiKey"),
        (ms({"remote": {"headers": {"X-Org": PLAIN, "n": 1}}}), "agents.defaults.memorySearch.remote.headers"),
        (ms({"remote": {"apiKey": PLAIN, "bogus": 1}}), "agents.defaults.memorySearch.remote.bogus"),
        (ms({"remote": {"apiKey": PLAIN, "maxRetries": 99}}), "agents.defaults.memorySearch.remote.maxRetries"),
        # typo'd secret key names
        (ms({"remote": {"apikey": PLAIN}}), "agents.defaults.memorySearch.remote.apikey"),
        (ms({"remote": {"apiKeys": PLAIN}}), "agents.defaults.memorySearch.remote.apiKeys"),
        (ms({"remote": {"api_key": PLAIN}}), "agents.defaults.memorySearch.remote.api_key"),
        (ms({"apiKey": PLAIN}), "agents.defaults.memorySearch.apiKey"),
        # the key where an object belongs: sections are described by type, never echoed
        (ms({"remote": PLAIN}), "agents.defaults.memorySearch.remote"),
        (ms({"remote": [PLAIN]}), "agents.defaults.memorySearch.remote"),
        ({"agents": {"defaults": {"memorySearch": PLAIN}}}, "agents.defaults.memorySearch"),
        ({"agents": PLAIN}, "agents"),
        (json.dumps(PLAIN), None),
        ({"agents": {"list": {"id": "a", "memorySearch": {"remote": {"apiKey": PLAIN}}}}}, "agents.list"),
        # a secret-looking key inside a value that is shown
        (ms({"extraPaths": ["notes", {"token": PLAIN}]}), "agents.defaults.memorySearch.extraPaths"),
        (ms({"extraPaths": [{"Authorization": PLAIN}]}), "agents.defaults.memorySearch.extraPaths"),
        # a recognisable credential in a wrong place
        (ms({"provider": SECRET}), "agents.defaults.memorySearch.provider"),
        (ms({"model": [SECRET]}), "agents.defaults.memorySearch.model"),
        (ms({"remote": {"dimensions": f"Bearer {PLAIN}"}}), "agents.defaults.memorySearch.remote.dimensions"),
        (ms({"remote": {"baseUrl": [f"https://me:{PLAIN}@host/v1"]}}), "agents.defaults.memorySearch.remote.baseUrl"),
        ({"agents": {"defaults": {"workspace": [SECRET]}}}, "agents.defaults.workspace"),
        ({"agents": {"defaults": {"userTimezone": SECRET}}}, "agents.defaults.userTimezone"),
        ({"agents": {"list": [{"id": f"{SECRET} x"}]}}, "agents.list[0].id"),
        # a credential pasted as a key name
        (ms({"remote": {SECRET: True}}), "agents.defaults.memorySearch.remote.[REDACTED:openai_key]"),
    ],
)
def test_a_secret_is_never_echoed_whatever_the_error(
    tmp_path: Path, env: dict[str, str], data: Any, key: str | None
) -> None:
    err = error(tmp_path, env, data)
    assert err.key == key and "Fix:" in str(err)
    assert PLAIN not in str(err) and SECRET not in str(err) and "very-secret" not in str(err)


def test_a_credential_as_an_ignored_key_name_is_not_listed(tmp_path: Path, env: dict[str, str]) -> None:
    cfg = load_config(write(tmp_path, {"gateway": {}, SECRET: 1, "agents": {"defaults": {f"Bearer {PLAIN}": 1}}}), env)
    assert cfg.ignored_keys == ("gateway", "[REDACTED:openai_key]", "agents.defaults.Bearer [REDACTED:bearer_token]")


def test_public_keys_that_look_secret_are_still_shown(tmp_path: Path, env: dict[str, str]) -> None:
    """``tokens``, ``keywordScore``, ``sessionContext``... contain "token", "key", "session" but are ours."""
    message = str(error(tmp_path, env, ms({"extraPaths": [{"tokens": 400, "keywordScore": "blend"}]})))
    assert '[{"tokens": 400, "keywordScore": "blend"}]' in message
    assert "got 100000" in str(error(tmp_path, env, ms({"chunking": {"tokens": 100000}})))


@pytest.mark.parametrize("value", [None, "x", 1.5, -1, True, [], {}, ["x"], {"a": "b"}, 10**30])
def test_any_value_at_any_key_loads_or_raises_config_error(tmp_path: Path, env: dict[str, str], value: Any) -> None:
    for path in leaf_paths(MemorySearchConfig):
        try:
            load_config(write(tmp_path, ms(nested(path, value))), env)
        except ConfigError as err:
            assert err.key and path.split(".")[0] in err.key


# -- the example file and the rule table ------------------------------------------------------------


def test_example_file_values_are_the_defaults(env: dict[str, str]) -> None:
    cfg = load_config(EXAMPLE, env)
    assert cfg.ignored_keys == ()
    assert [a.id for a in cfg.agents] == ["main"]
    assert cfg.agent().memory_search == MemorySearchConfig()
    assert cfg.agent().workspace == Path(env["HOME"]) / "clawd"
    assert cfg.service == ServiceConfig()  # the service section too (its maxBodyBytes once said 2 MiB)


def test_example_file_documents_every_field() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    example = json5.loads(text)
    missing = []
    for cls, section in (
        (MemorySearchConfig, example["agents"]["defaults"]["memorySearch"]),
        (ServiceConfig, example["service"]),
    ):
        for path in leaf_paths(cls):
            node: Any = section
            for key in path.split("."):
                listed = key.endswith("[]")
                node = node.get(key.removesuffix("[]"), KeyError) if isinstance(node, dict) else KeyError
                node = node[0] if listed and isinstance(node, list) and node else node
            missing += [path] if node is KeyError else []
    assert missing == []
    for key in ("workspace", "list", "id", "default", "memorySearch"):
        assert re.search(rf"^\s*(//\s*)*{key}:", text, re.M), key
    lines = text.splitlines()
    for i, line in enumerate(lines):  # every key line is preceded by a comment line
        if re.match(r"^\s*(//\s*)?\w+: [^{\[]", line) and "memorySearch: {" not in line:
            assert lines[i - 1].strip().startswith("//"), line


def test_example_agent_list_is_valid_when_uncommented(tmp_path: Path, env: dict[str, str]) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    start = text.index("    // list: [")
    end = text.index("    // ],", start) + len("    // ],")
    block = re.sub(r"^    // ", "    ", text[start:end], flags=re.M)
    cfg = load_config(write(tmp_path, text[:start] + block + text[end:]), env)
    assert [(a.id, a.default) for a in cfg.agents] == [("main", True), ("work", False)]
    work = cfg.agent("work").memory_search
    assert work.provider == "openai" and work.query.max_results == 10
    assert work.extra_paths == (str(Path(env["HOME"]) / "shared-notes"),)


def test_range_rules_name_real_numeric_fields() -> None:
    paths = set(leaf_paths(MemorySearchConfig))
    assert set(RANGES) <= paths


def test_paths_are_absolute_but_symlinks_are_kept(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws/link").symlink_to(tmp_path / "target")
    data = {"agents": {"defaults": {"workspace": "ws", "memorySearch": {"extraPaths": ["link", "sub/../link"]}}}}
    agent = load_config(write(tmp_path, data), env).agent()
    assert agent.memory_search.extra_paths == (str(tmp_path / "ws/link"),)
