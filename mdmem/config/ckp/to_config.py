"""A CKP 0.3.0 ``kind: Memory`` declaration -> an mdmem config (the dict a config file holds), with a report of
what each field became (docs/ckp.md has the table).

- the first ``semantic`` store is the agent's index: ``backend`` sqlite-vec/sqlite -> ``store.backend`` sqlite,
  pgvector/postgresql -> postgres; ``path`` -> ``store.path``; ``embedding`` -> ``provider``/``model``/
  ``remote.dimensions``; ``search`` -> ``query.hybrid`` and ``query.maxResults``;
- the first ``workspace`` store is the agent's workspace (``path``; ``isolation: shared`` puts it in
  ``agents.defaults``, else in the agent's own entry);
- the first ``conversation`` store adds the sessions source (``sources: ["memory", "sessions"]``);
- ``retention``/``forgetting`` of the semantic or workspace store -> ``lifecycle.tiers`` (daily logs);
- the rest is reported unsupported (key-value and checkpoint stores, compaction, max_entries...) or ignored
  (the cognitive hints CKP lets a runtime ignore, metadata).

Path templates are resolved here, as the spec asks before any filesystem access: ``{identity_name}`` is the
agent id (in ``store.path``, mdmem's own ``{agentId}``), other variables come from ``variables``; a path
with a variable that has no value is refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mdmem.config.ckp import policy, rules
from mdmem.config.ckp import stores as kinds
from mdmem.config.ckp.fields import MS, Field
from mdmem.config.ckp.mapper import Mapper
from mdmem.config.validation import AGENT_ID
from mdmem.util.errors import ConfigError

_OWN_TYPES = ("semantic", "workspace", "conversation")
_HANDLERS = {"semantic": kinds.semantic, "workspace": kinds.workspace, "conversation": kinds.conversation}


@dataclass
class Imported:
    """The config (``agents``...), the report, and the declaration's name."""

    config: dict[str, Any]
    fields: list[Field]
    name: str
    agent: str


def to_config(
    doc: Any,
    agent: str = "main",
    variables: Mapping[str, str] | None = None,
    base: str | None = None,
    source: str | None = None,
) -> Imported:
    """The mdmem config for the declaration ``doc`` (checked first: ``ConfigError`` naming the field), for agent
    ``agent``; relative paths are relative to ``base`` (the declaration's folder; default the current one)."""
    if not AGENT_ID.fullmatch(agent):
        raise ConfigError(
            f"agent id {agent!r}: expected letters, digits, '_' and '-'. Fix: use an id such as main.", key="agent"
        )
    rules.check(doc, source)
    m = Mapper(agent, dict(variables or {}), os.path.abspath(base or os.getcwd()), source)
    m.add("claw", "checked", doc["claw"])
    m.add("kind", "checked", doc["kind"])
    for key, value in doc["metadata"].items():
        note = "runtimes MUST NOT act on annotations" if key == "annotations" else "names the declaration"
        m.add(f"metadata.{key}", "ignored", value, note=note)
    first: dict[str, int] = {}
    stores = doc["spec"]["stores"]
    order = sorted(
        range(len(stores)),
        key=lambda i: (
            ("workspace", "semantic", "conversation").index(stores[i]["type"]) if stores[i]["type"] in _OWN_TYPES else 3
        ),
    )
    for i in order:
        store, at = stores[i], f"spec.stores[{i}]"
        kind = store["type"]
        if kind not in _OWN_TYPES:
            why = (
                "mdmem has no key-value store: durable facts are lines in MEMORY.md (memory_remember, truth)"
                if kind == "key-value"
                else "mdmem keeps no task checkpoints"
            )
            m.add(at, "unsupported", store["name"], note=f"a {kind} store: {why}; none of its fields is used")
            continue
        if kind in first:
            m.add(
                at,
                "unsupported",
                store["name"],
                note=f"mdmem has one {kind} store per agent: spec.stores[{first[kind]}] is it; "
                "none of this one's fields is used",
            )
            continue
        first[kind] = i
        _HANDLERS[kind](m, at, store)
        kinds.store_wide(m, at, store, kind)
    owners = [
        i
        for i in sorted(first.values())
        if stores[i]["type"] != "conversation" and ("retention" in stores[i] or "forgetting" in stores[i])
    ]
    if owners:
        policy.lifecycle(m, f"spec.stores[{owners[0]}]", stores[owners[0]])
        for i in owners[1:]:
            for key in ("retention", "forgetting"):
                if key in stores[i]:
                    m.add(
                        f"spec.stores[{i}].{key}",
                        "unsupported",
                        stores[i][key],
                        note=f"one lifecycle policy per agent: spec.stores[{owners[0]}]'s",
                    )
    else:
        m.add(
            "spec.stores",
            "defaulted",
            None,
            f"{MS}.lifecycle.tiers",
            None,
            "no retention or forgetting declared: mdmem's default (daily logs 90 days old, unused for 60), "
            "applied only by `mdmem lifecycle apply`",
        )
    if "semantic" not in first:
        m.add(
            "spec.stores",
            "defaulted",
            None,
            f"{MS}.store.backend",
            "sqlite",
            "no semantic store declared: mdmem indexes the memory files in SQLite anyway",
        )
    if m.ms:
        m.defaults["memorySearch"] = m.ms
    agents: dict[str, Any] = {"list": [{"id": agent, "default": True, **m.entry}]}
    if m.defaults:
        agents = {"defaults": m.defaults, **agents}
    ranked = sorted(enumerate(m.fields), key=lambda nf: (_path_key(nf[1].path), nf[0]))
    return Imported({"agents": agents}, [f for _, f in ranked], doc["metadata"]["name"], agent)


def _path_key(path: str) -> tuple[int, int]:
    """Fields in document order: the envelope, each store by index, then what concerns all stores."""
    top = ("claw", "kind", "metadata").index(path.split(".")[0]) if not path.startswith("spec") else 3
    if path.startswith("spec.stores["):
        return top, int(path[len("spec.stores[") :].split("]")[0])
    return top, 1 << 30 if path.startswith("spec") else 0
