"""CKP 0.3.0 ``kind: Memory``: ``mdmem ckp import`` and ``export`` on the spec's own examples (tests/data/ckp, copied
from the clawkernel repository), on invalid declarations of every class, and round trips both ways. The
commands run as real ``python -m mdmem`` processes; the configs they write are loaded with mdmem's loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mdmem.config.ckp import rules
from mdmem.config.ckp.fields import KNOWN_DIMS
from mdmem.config.ckp.from_config import to_declaration
from mdmem.config.ckp.to_config import to_config
from mdmem.config.load import load_config
from mdmem.util.errors import ConfigError

DATA = Path(__file__).parent / "data" / "ckp"
EXAMPLE = DATA / "memory.yaml"
SCHEMA_EXAMPLE = DATA / "schema-example.yaml"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "MDMEMORY_DAEMON": "off", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mdmem", "ckp", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=60
    )


def statuses(fields: list[dict[str, Any]]) -> dict[str, str]:
    return {f["path"]: f["status"] for f in fields if f["path"] != "spec.stores"}


# -- the validator is the published schema -------------------------------------------------------------------
def test_the_validator_has_the_schemas_fields_enums_and_required_keys() -> None:
    schema = json.loads((DATA / "memory.schema.json").read_text())
    store = schema["properties"]["spec"]["properties"]["stores"]["items"]
    assert set(rules.STORE.fields) == set(store["properties"])
    assert set(rules.STORE.required) == set(store["required"])
    for name, prop in store["properties"].items():
        ours = rules.STORE.fields[name]
        if "enum" in prop:
            assert set(ours.enum) == set(prop["enum"]), name
        for sub, sub_prop in prop.get("properties", {}).items():
            if "enum" in sub_prop:
                assert set(ours.fields[sub].enum) == set(sub_prop["enum"]), f"{name}.{sub}"
            if sub_prop.get("minimum") is not None:
                assert ours.fields[sub].minimum == sub_prop["minimum"]
        if "required" in prop:
            assert set(ours.required) == set(prop["required"]), name
    assert set(rules.MEMORY.required) == set(schema["required"])
    definitions = json.loads((DATA / "definitions.schema.json").read_text())["$defs"]
    assert definitions["protocolVersion"]["const"] == rules.PROTOCOL
    assert definitions["durationString"]["pattern"] == "^" + rules.DURATION.pattern + "$"
    assert set(definitions["kind"]["enum"]) <= set(rules.KINDS) | {"Claw"}


def test_the_known_model_sizes_are_the_remote_providers() -> None:
    from mdmem.providers.remote import KNOWN_MODELS

    assert {model: size for model, (size, _) in KNOWN_MODELS.items()} == KNOWN_DIMS


# -- import ---------------------------------------------------------------------------------------------------
def test_import_of_the_specs_example_maps_each_field_and_the_config_loads(tmp_path: Path) -> None:
    out = tmp_path / "config.json5"
    done = run("import", str(EXAMPLE), "--output", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["written"] == str(out) and result["name"] == "hybrid-memory"
    got = statuses(result["fields"])
    expected = {
        "claw": "checked",
        "kind": "checked",
        "metadata.name": "ignored",
        "spec.stores[0].type": "mapped",  # conversation -> the sessions source
        "spec.stores[0].retention": "unsupported",  # max_entries on sessions: mdmem keeps them
        "spec.stores[0].compaction": "unsupported",
        "spec.stores[0].lifecycle": "ignored",  # a cognitive hint
        "spec.stores[0].role": "ignored",
        "spec.stores[1].backend": "mapped",
        "spec.stores[1].search.fusion": "mapped",
        "spec.stores[1].search.top_k": "mapped",
        "spec.stores[1].embedding.provider_ref": "mapped",
        "spec.stores[1].embedding.model": "checked",
        "spec.stores[1].embedding.dimensions": "checked",
        "spec.stores[2]": "unsupported",  # key-value
        "spec.stores[3].path": "mapped",
        "spec.stores[3].isolation": "unsupported",  # per-channel
        "spec.stores[3].max_size_mb": "unsupported",
    }
    assert {k: got.get(k) for k in expected} == expected
    assert result["counts"]["unsupported"] == sum(1 for s in got.values() if s == "unsupported")
    lifecycle = [f for f in result["fields"] if f["path"] == "spec.stores" and f["key"].endswith("lifecycle.tiers")]
    assert lifecycle and lifecycle[0]["status"] == "defaulted"

    home = tmp_path / "home"
    config = load_config(out, env={"HOME": str(tmp_path), "MDMEMORY_HOME": str(home)})
    agent = config.agent()
    ms = agent.memory_search
    assert agent.id == "main"
    assert agent.workspace == tmp_path / ".claw" / "workspaces" / "project-assistant"
    assert (ms.provider, ms.model, ms.remote.dimensions) == ("openai", None, None)
    assert (ms.store.backend, ms.query.max_results, ms.query.hybrid.fusion) == ("sqlite", 10, "rrf")
    assert ms.sources == ("memory", "sessions")
    assert ms.lifecycle.tiers[0].older_than_days == 90 and ms.lifecycle.schedule == "off"


def test_import_prints_the_config_on_stdout_and_the_report_on_stderr(tmp_path: Path) -> None:
    done = run("import", str(SCHEMA_EXAMPLE), "--agent", "research-bot", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["agents"]["list"][0] == {
        "id": "research-bot",
        "default": True,
        "workspace": "~/.claw/workspaces/research-bot",  # {identity_name}: the agent id
    }
    assert 'ckp import: Memory "hybrid-memory" (CKP 0.3.0) for agent research-bot' in done.stderr
    assert "unsupported  spec.stores[4]" in done.stderr  # the checkpoint store
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_retention_and_forgetting_become_the_lifecycle_tier(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    knowledge = doc["spec"]["stores"][1]
    knowledge.update(
        retention={"max_age": "36h", "max_entries": 10},
        forgetting={"strategy": "decay", "signals": ["reuse", "contradiction"]},
    )
    knowledge["path"] = "indexes/{identity_name}.sqlite"
    done = to_config(doc, agent="ops", base=str(tmp_path))
    ms = done.config["agents"]["defaults"]["memorySearch"]
    assert ms["lifecycle"]["tiers"] == [
        {"name": "daily", "paths": ["memory/????-??-??.md"], "olderThanDays": 2, "unusedDays": 60, "action": "archive"}
    ]
    assert ms["store"]["path"] == str(tmp_path / "indexes" / "{agentId}.sqlite")  # mdmem's own template
    got = {f.path: f.status for f in done.fields}
    assert got["spec.stores[1].retention.max_age"] == "unsupported"  # 36h is rounded up to 2 days
    assert got["spec.stores[1].retention.max_entries"] == "unsupported"
    assert got["spec.stores[1].forgetting.signals[0]"] == "mapped"
    assert got["spec.stores[1].forgetting.signals[1]"] == "unsupported"
    knowledge["forgetting"] = {"strategy": "none"}
    del knowledge["retention"]
    ms = to_config(doc).config["agents"]["defaults"]["memorySearch"]
    assert ms["lifecycle"]["tiers"] == []


# -- invalid declarations -------------------------------------------------------------------------------------
GOOD = EXAMPLE.read_text()
INVALID = {
    "missing-required": (
        GOOD.replace("spec:\n  stores:", "spec:\n  storez:"),
        "spec.stores: missing; it is required. Fix: rename 'storez'",
    ),
    "missing-spec": (GOOD.split("spec:")[0], "spec: missing"),
    "wrong-type": (GOOD.replace("top_k: 10", 'top_k: "ten"'), "spec.stores[1].search.top_k: expected an integer"),
    "wrong-enum": (GOOD.replace('backend: "sqlite-vec"', 'backend: "sqlitevec"'), 'did you mean "sqlite-vec"'),
    "below-minimum": (GOOD.replace("dimensions: 1536", "dimensions: 0"), "spec.stores[1].embedding.dimensions"),
    "unknown-kind": (GOOD.replace("kind: Memory", "kind: Memroy"), 'kind: expected "Memory"'),
    "other-kind": (GOOD.replace("kind: Memory", "kind: Identity"), "this is a Identity declaration"),
    "other-version": (GOOD.replace('claw: "0.3.0"', 'claw: "0.2.0"'), 'claw: expected "0.3.0"'),
    "unknown-field": (
        GOOD.replace("top_k: 10", "top_k: 10\n        topk: 3"),
        "spec.stores[1].search.topk: unknown field",
    ),
    "bad-yaml": (GOOD.replace("  stores:\n", "  stores:\n   - [\n"), "invalid YAML: line"),
    "duplicate-key": (
        GOOD.replace('  version: "1.0.0"', '  version: "1.0.0"\n  version: "2.0.0"'),
        "duplicate key 'version'",
    ),
    "not-a-mapping": ("- claw: 0.3.0\n", "the declaration must be a mapping"),
    "empty-stores": (GOOD.split("  stores:")[0] + "  stores: []\n", "spec.stores: expected at least 1"),
    "same-store-name": (GOOD.replace('name: "preferences"', 'name: "knowledge"'), "spec.stores[2].name"),
    "embedding-incomplete": (
        GOOD.replace("        dimensions: 1536\n", ""),
        "spec.stores[1].embedding.dimensions: missing",
    ),
    "bad-duration": (GOOD.replace("max_entries: 50000", 'max_age: "3 weeks"'), "spec.stores[0].retention.max_age"),
    "bad-name": (GOOD.replace('name: "hybrid-memory"', 'name: "hybrid memory!"'), "metadata.name"),
    "unresolved-template": (
        GOOD.replace("project-assistant/", "{tenant_id}/"),
        "spec.stores[3].path: the path template",
    ),
    "alias-bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True))
        + GOOD,
        "expands to more than",
    ),
    "recursive-alias": ("claw: &c [*c]\n", "line 1: a YAML alias refers to a value that holds it"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_declaration_is_refused_naming_the_field_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    text, named = INVALID[case]
    declaration = tmp_path / "memory.yaml"
    declaration.write_text(text)
    out = tmp_path / "config.json5"
    done = run("import", str(declaration), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert named in done.stderr and "Fix:" in done.stderr, done.stderr
    assert done.stderr.startswith(f"mdmem: error: {declaration}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.yaml"]


def test_output_never_replaces_a_file_without_force(tmp_path: Path) -> None:
    out = tmp_path / "config.json5"
    out.write_text("{ agents: {} }\n")
    done = run("import", str(EXAMPLE), "--output", str(out), cwd=tmp_path)
    assert done.returncode == 2 and "exists already; nothing was written" in done.stderr
    assert out.read_text() == "{ agents: {} }\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json5"]  # no temporary file left
    done = run("import", str(EXAMPLE), "--output", str(out), "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["agents"]["list"][0]["id"] == "main"


def test_strict_fails_on_an_unsupported_field_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "config.json5"
    done = run("import", str(EXAMPLE), "--output", str(out), "--strict", cwd=tmp_path)
    assert done.returncode == 1 and "spec.stores[2]" in done.stderr and not out.exists()


# -- export and round trips ---------------------------------------------------------------------------------
def _config(tmp_path: Path, memory_search: str) -> Path:
    (tmp_path / "ws").mkdir()
    path = tmp_path / "config.json5"
    path.write_text(
        f'{{ agents: {{ defaults: {{ workspace: "ws", memorySearch: {memory_search} }}, list: [{{ id: "main" }}] }} }}'
    )
    return path


SQLITE = """{ provider: "openai", remote: { apiKey: "sk-proj-Zq3xV9wLm2Rt8YkP4sNd7Hc1Bf6Gj0Ea" },
  sources: ["memory", "sessions"],
  query: { maxResults: 8, hybrid: { fusion: "rrf" } },
  lifecycle: { tiers: [{ name: "daily", paths: ["memory/????-??-??.md"], olderThanDays: 30, unusedDays: 60 }] } }"""


def test_export_of_a_sqlite_config_round_trips_and_never_shows_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, SQLITE)
    env = {"MDMEMORY_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "sk-proj-Envkey0123456789abcdefghijKLMN"}
    done = run("export", "--config", str(config), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "sk-proj" not in done.stdout + done.stderr
    declaration = yaml.safe_load(done.stdout)
    rules.check(declaration)  # valid CKP
    index = declaration["spec"]["stores"][1]
    assert index["backend"] == "sqlite-vec"
    assert index["search"] == {"strategy": "hybrid", "fusion": "reciprocal-rank", "top_k": 8}
    assert index["embedding"] == {"provider_ref": "openai", "model": "text-embedding-3-small", "dimensions": 1536}
    assert index["retention"] == {"max_age": "30d"} and index["forgetting"]["signals"] == ["recency", "reuse"]
    assert declaration["spec"]["stores"][2]["path"] == str(tmp_path / "ws" / "sessions")
    assert "memorySearch.remote.apiKey" in done.stderr  # not carried: a secret

    exported = tmp_path / "memory.yaml"
    exported.write_text(done.stdout)
    out = tmp_path / "again.json5"
    assert run("import", str(exported), "--output", str(out), cwd=tmp_path).returncode == 0
    before = load_config(config, env=env).agent()
    after = load_config(out, env=env).agent()
    assert after.workspace == before.workspace
    carried = before.memory_search
    again = after.memory_search
    assert (again.provider, again.store, again.sources, again.query, again.lifecycle) == (
        carried.provider,
        carried.store,
        carried.sources,
        carried.query,
        carried.lifecycle,
    )


def test_export_of_a_postgres_config_redacts_the_password(tmp_path: Path) -> None:
    url = "postgresql://mem:Tr0ub4dor-and-3@127.0.0.1:1/memdb"
    config = _config(tmp_path, f'{{ provider: "none", store: {{ backend: "postgres", url: "{url}" }} }}')
    done = run("export", "--config", str(config), "--json", cwd=tmp_path, env={"MDMEMORY_HOME": str(tmp_path / "h")})
    assert done.returncode == 0, done.stderr
    assert "Tr0ub4dor" not in done.stdout + done.stderr
    result = json.loads(done.stdout)
    declaration = result["declaration"]
    rules.check(declaration)
    assert declaration["metadata"]["annotations"]["mdmem/index"] == (
        "postgresql://mem:[REDACTED]@127.0.0.1:1/memdb (schema mdmemory)"
    )
    index = declaration["spec"]["stores"][1]
    assert index["backend"] == "pgvector" and index["search"]["strategy"] == "fts-only" and "embedding" not in index
    assert result["notCarried"] == ["memorySearch.store.url"]
    imported = to_config(declaration, base=str(tmp_path)).config
    assert imported["agents"]["defaults"]["memorySearch"]["store"] == {"backend": "postgres"}
    assert imported["agents"]["defaults"]["memorySearch"]["provider"] == "none"


def test_export_of_an_imported_example_is_a_valid_declaration_that_imports_the_same(tmp_path: Path) -> None:
    for example in (EXAMPLE, SCHEMA_EXAMPLE):
        first = to_config(yaml.safe_load(example.read_text()), base=str(tmp_path))
        path = tmp_path / f"{example.stem}.json5"
        path.write_text(json.dumps(first.config))
        agent = load_config(path, env={"HOME": str(tmp_path), "MDMEMORY_HOME": str(tmp_path / "h")}).agent()
        exported = to_declaration(agent)
        rules.check(exported.declaration)
        second = to_config(exported.declaration, base=str(tmp_path))
        ms1 = first.config["agents"]["defaults"]["memorySearch"]
        ms2 = second.config["agents"]["defaults"]["memorySearch"]
        for key in ("provider", "sources", "query"):
            assert ms2.get(key) == ms1.get(key), (example.name, key)
        assert exported.not_carried == []


def test_a_path_template_without_a_value_is_refused_and_one_given_is_used(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["stores"][3]["path"] = "/srv/{tenant_id}/{identity_name}"
    with pytest.raises(ConfigError, match=r"spec.stores\[3\].path: the path template \{tenant_id\}"):
        to_config(doc)
    done = to_config(doc, agent="bot", variables={"tenant_id": "acme"})
    assert done.config["agents"]["list"][0]["workspace"] == "/srv/acme/bot"
