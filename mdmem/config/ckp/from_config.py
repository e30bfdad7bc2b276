"""An agent's loaded config -> its CKP 0.3.0 ``kind: Memory`` declaration, and what the declaration cannot carry.

Three stores: ``workspace`` (the agent's folder), ``index`` (``semantic``: the backend, the embedding, the
search, and the lifecycle as ``retention``/``forgetting``), and ``conversations`` when the sessions source is
on. What the declaration leaves out is found by importing it again (mdmem.config.ckp.to_config) and comparing
the settings: every key whose value would not come back is listed. Secrets never go into it: no URL, key or
header of the config is a CKP field; the PostgreSQL URL in the annotations has its password replaced, and
every string is passed through the redaction rules at the end.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from mdmem.config.ckp.fields import HASH_DIMS, HASH_MODEL, KNOWN_DIMS
from mdmem.config.ckp.rules import PROTOCOL
from mdmem.config.ckp.to_config import to_config
from mdmem.config.settings import DEFAULT_LOCAL_MODEL, DEFAULT_REMOTE_MODEL, AgentConfig, MemorySearchConfig
from mdmem.config.store import DEFAULT_STORE_PATH, shown_url
from mdmem.config.validation import Loader, build, camel
from mdmem.util.redaction.credentials import redact_value

SECRET_KEYS = ("remote.apiKey", "remote.headers", "store.url")


@dataclass
class Exported:
    """The declaration, the config keys it does not carry (import gives mdmem's default for them instead),
    and notes on what it says."""

    declaration: dict[str, Any]
    not_carried: list[str]
    notes: list[str]


def _name(agent_id: str) -> str:
    """A CKP name (kebab: letters, digits, hyphens, at most 63) for the agent's declaration."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", agent_id).strip("-") or "agent"
    return f"{name[:56]}-memory"


def _embedding(ms: MemorySearchConfig, index: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``provider_ref``/``model``/``dimensions``, or None when the size is not known (before the first index)."""
    provider = ms.provider
    built_by = (index or {}).get("provider")
    size = (index or {}).get("dims")
    chosen = built_by if provider == "auto" else provider
    if chosen not in ("local", "openai", "hash"):
        return None
    model = ms.model or {"local": ms.local.model_path, "openai": DEFAULT_REMOTE_MODEL, "hash": HASH_MODEL}[chosen]
    if chosen == "local" and provider == "local":
        model = ms.model or ms.local.model_path
    own = {"openai": ms.remote.dimensions or KNOWN_DIMS.get(model), "hash": ms.remote.dimensions or HASH_DIMS}.get(
        chosen
    )
    dims = own or (size if built_by == chosen else None)
    if not dims:
        return None
    return {"provider_ref": provider, "model": model, "dimensions": int(dims)}


def _lifecycle(ms: MemorySearchConfig) -> tuple[dict[str, Any], list[str]]:
    tiers = [t for t in ms.lifecycle.tiers if t.action == "archive"]
    if not tiers:
        return {"forgetting": {"strategy": "none"}}, ["no lifecycle tier archives: forgetting strategy none"]
    tier = tiers[0]
    signals = ["recency", "reuse"] if tier.unused_days > 0 else ["recency"]
    out = {
        "retention": {"max_age": f"{tier.older_than_days}d"},
        "forgetting": {"strategy": "decay", "signals": signals},
    }
    notes = [
        f"retention and forgetting are lifecycle tier {tier.name!r} (files matching {', '.join(tier.paths)}): "
        "archived, "
        "not deleted; "
        + (
            "applied by `mdmem lifecycle apply`"
            if ms.lifecycle.schedule == "off"
            else f"applied {ms.lifecycle.schedule} by `mdmem watch`"
        )
    ]
    return out, notes


def to_declaration(agent: AgentConfig, index: Mapping[str, Any] | None = None) -> Exported:
    """The declaration of ``agent``'s memory. ``index`` is what its index records of the embedding
    (``provider``, ``model``, ``dims``), when there is one: the size of a local model is known only from it."""
    ms = agent.memory_search
    notes: list[str] = []
    workspace = {
        "name": "workspace",
        "type": "workspace",
        "backend": "filesystem",
        "path": str(agent.workspace),
        "isolation": "per-identity",
    }
    semantic: dict[str, Any] = {"name": "index", "type": "semantic"}
    semantic["backend"] = "pgvector" if ms.store.backend == "postgres" else "sqlite-vec"
    if ms.store.backend == "sqlite" and ms.store.path != DEFAULT_STORE_PATH:
        path = ms.store.path.replace("{home}", str(agent.home))
        if not path.startswith(("/", "~")):
            path = os.path.join(str(agent.home), path)
        semantic["path"] = path.replace("{agentId}", "{identity_name}")
    embedding = _embedding(ms, index) if ms.provider != "none" else None
    if embedding is not None:
        semantic["embedding"] = embedding
    elif ms.provider != "none":
        notes.append("no embedding declared: the model's size is known once the index is built (`mdmem index`)")
    strategy = "fts-only" if ms.provider == "none" else ("hybrid" if ms.query.hybrid.enabled else "vector-only")
    fusion = "reciprocal-rank" if ms.query.hybrid.fusion == "rrf" else "linear-combination"
    semantic["search"] = {"strategy": strategy, "fusion": fusion, "top_k": ms.query.max_results}
    if fusion == "linear-combination":
        notes.append(
            f"fusion linear-combination: {ms.query.hybrid.vector_weight:g} x vector + "
            f"{ms.query.hybrid.text_weight:g} x keyword score (mdmem's default fusion)"
        )
    policy, policy_notes = _lifecycle(ms)
    semantic.update(policy)
    notes += policy_notes
    stores = [workspace, semantic]
    if "sessions" in ms.sources:
        stores.append(
            {
                "name": "conversations",
                "type": "conversation",
                "backend": "filesystem",
                "path": str(agent.workspace / "sessions"),
            }
        )
    where = (
        shown_url(ms.store.url) + f" (schema {ms.store.schema})"
        if ms.store.backend == "postgres" and ms.store.url
        else str(agent.store_path)
    )
    stores = redact_value(stores, public=_public_keys(stores))  # a path or model name holding a token
    # the index's place as status shows it (the URL's password replaced: shown_url), the agent id and its path
    # after the same redaction as the stores (redact_value would take the whole URL for a credential)
    annotations = {
        "mdmem/agent": agent.id,
        "mdmem/index": where if ms.store.backend == "postgres" else redact_value(where),
    }
    metadata = {"name": _name(agent.id), "annotations": annotations}
    declaration = {"claw": PROTOCOL, "kind": "Memory", "metadata": metadata, "spec": {"stores": stores}}
    return Exported(declaration, not_carried(agent, declaration), notes)


def _public_keys(value: Any) -> set[str]:
    """Every key of the declaration: CKP's names are not secrets (``redact_value`` checks the values)."""
    if isinstance(value, dict):
        return {str(k) for k in value} | {k for v in value.values() for k in _public_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _public_keys(v)}
    return set()


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if not is_dataclass(value):
        return {prefix: value}
    out: dict[str, Any] = {}
    for f in fields(value):
        out.update(_leaves(getattr(value, f.name), f"{prefix}.{camel(f.name)}" if prefix else camel(f.name)))
    return out


def _comparable(ms: MemorySearchConfig, home: Path) -> dict[str, Any]:
    """``ms`` as flat camelCase keys, the model and the store's path as they take effect."""
    leaves = _leaves(ms)
    leaves["store.path"] = os.path.join(str(home), ms.store.path.replace("{home}", str(home)))
    leaves.pop("local.modelPath")
    leaves["model"] = ms.model or (ms.local.model_path if ms.provider in ("local", "auto") else None)
    if ms.provider == "auto" and leaves["model"] == DEFAULT_REMOTE_MODEL:
        leaves["model"] = DEFAULT_LOCAL_MODEL  # auto's two defaults: whichever it picks
    return leaves


def not_carried(agent: AgentConfig, declaration: dict[str, Any]) -> list[str]:
    """The ``memorySearch`` keys of ``agent`` whose value importing ``declaration`` would not give back."""
    imported = to_config(declaration, agent=agent.id).config
    raw = imported["agents"].get("defaults", {}).get("memorySearch", {})
    again = build(MemorySearchConfig, Loader(None).section(MemorySearchConfig, raw, "memorySearch"))
    before, after = _comparable(agent.memory_search, agent.home), _comparable(again, agent.home)
    missing = [k for k in before if k not in SECRET_KEYS and before[k] != after.get(k)]
    missing += [k for k in SECRET_KEYS if before.get(k)]
    return [f"memorySearch.{k}" for k in sorted(set(missing))]
