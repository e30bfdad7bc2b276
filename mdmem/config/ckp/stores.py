"""The stores mdmem has, from a declaration: ``semantic`` (the index, its embedding and search), ``workspace``,
``conversation`` (the sessions source), and the fields any store may hold (mdmem.config.ckp.to_config)."""

from __future__ import annotations

import os
from typing import Any

from mdmem.config.ckp.fields import COGNITIVE, HASH_DIMS, HASH_MODEL, KNOWN_DIMS, MS, PROVIDERS, is_local_model
from mdmem.config.ckp.mapper import Mapper
from mdmem.config.settings import DEFAULT_LOCAL_MODEL, DEFAULT_REMOTE_MODEL, QueryConfig


def store_wide(m: Mapper, at: str, store: dict[str, Any], kind: str) -> None:
    """The fields every store may have that mean the same in each: hints, compaction, scope, size..."""
    m.add(f"{at}.name", "checked", store["name"])
    for key in ("role", "lifecycle", "salience", "confidence"):
        if key in store:
            note = COGNITIVE
            if key == "lifecycle":
                note += "; mdmem's lifecycle policy comes from retention and forgetting"
            m.add(f"{at}.{key}", "ignored", store[key], note=note)
    if "compaction" in store:
        m.add(f"{at}.compaction", "unsupported", store["compaction"], note="mdmem never compacts what it stores")
    if store.get("encryption") is True:
        m.add(f"{at}.encryption", "unsupported", True, note="mdmem does not encrypt; use an encrypted disk or database")
    elif "encryption" in store:
        m.add(f"{at}.encryption", "checked", False)
    if "max_size_mb" in store:
        m.add(
            f"{at}.max_size_mb",
            "unsupported",
            store["max_size_mb"],
            note="mdmem sets no size cap (memorySearch.maxFileBytes caps one file)",
        )
    if "checkpoint" in store:
        m.add(f"{at}.checkpoint", "unsupported", store["checkpoint"], note="mdmem keeps no checkpoints")
    for key in ("scope", "isolation"):
        if key not in store or (kind == "workspace" and key == "isolation"):
            continue
        if store[key] == "per-identity":
            m.add(f"{at}.{key}", "checked", store[key], note="each agent has its own index and workspace")
        else:
            m.add(
                f"{at}.{key}",
                "unsupported",
                store[key],
                note="each agent has its own index; nothing is shared or per channel",
            )
    if kind != "semantic":
        for key in ("embedding", "search"):
            if key in store:
                m.add(
                    f"{at}.{key}",
                    "unsupported",
                    store[key],
                    note="mdmem searches one index: declare it on the semantic store",
                )


def semantic(m: Mapper, at: str, store: dict[str, Any]) -> None:
    m.add(f"{at}.type", "mapped", "semantic", note="the agent's index (keywords and vectors over the memory files)")
    backend = store.get("backend")
    if backend in ("sqlite-vec", "sqlite"):
        m.add(f"{at}.backend", "mapped", backend, m.put("store.backend", "sqlite"), "sqlite")
    elif backend in ("pgvector", "postgresql"):
        note = "the declaration names no database: set store.url or MDMEMORY_PG_URL "
        "(never a password in a declaration)"
        m.add(f"{at}.backend", "mapped", backend, m.put("store.backend", "postgres"), "postgres", note)
    elif backend is None:
        m.add(f"{at}.backend", "defaulted", None, f"{MS}.store.backend", "sqlite", "SQLite with sqlite-vec")
    else:
        m.add(
            f"{at}.backend",
            "unsupported",
            backend,
            f"{MS}.store.backend",
            "sqlite",
            "mdmem's index is SQLite (sqlite-vec) or PostgreSQL (pgvector)",
        )
    if "path" in store:
        if m.ms.get("store", {}).get("backend") == "postgres":
            m.add(
                f"{at}.path",
                "unsupported",
                store["path"],
                note="a PostgreSQL index lives in the database, not at a path",
            )
        else:
            value = m.path(store["path"], f"{at}.path", store_template=True)
            m.add(f"{at}.path", "mapped", store["path"], m.put("store.path", value), value)
    search = store.get("search", {})
    strategy = search.get("strategy")
    where = f"{at}.search.strategy"
    if strategy == "fts-only":
        m.add(where, "mapped", strategy, m.put("provider", "none"), "none", "keywords only (no embeddings)")
    elif strategy == "vector-only":
        note = (
            "vectors only; a query that cannot be embedded, or a chunk whose vectors are pending, is found by keywords"
        )
        m.add(where, "mapped", strategy, m.put("query.hybrid.enabled", False), False, note)
    elif strategy == "hybrid":
        m.add(where, "mapped", strategy, m.put("query.hybrid.enabled", True), True)
    else:
        m.add(where, "defaulted", None, f"{MS}.query.hybrid.enabled", True, "hybrid: keywords and vectors")
    fusion = search.get("fusion")
    where = f"{at}.search.fusion"
    if fusion == "reciprocal-rank":
        m.add(
            where,
            "mapped",
            fusion,
            m.put("query.hybrid.fusion", "rrf"),
            "rrf",
            "weighted by query.hybrid.vectorWeight/textWeight, k = query.hybrid.rrfK",
        )
    elif fusion == "linear-combination":
        m.add(
            where,
            "mapped",
            fusion,
            m.put("query.hybrid.fusion", "weighted"),
            "weighted",
            "vectorWeight x vector score + textWeight x keyword score",
        )
    else:
        m.add(
            where,
            "defaulted",
            None,
            f"{MS}.query.hybrid.fusion",
            "weighted",
            "linear combination: 0.7 x vector + 0.3 x keyword score",
        )
    top_k, where = search.get("top_k"), f"{at}.search.top_k"
    if top_k is None:
        m.add(where, "defaulted", None, f"{MS}.query.maxResults", QueryConfig.max_results)
    elif top_k > 100:
        m.add(where, "unsupported", top_k, m.put("query.maxResults", 100), 100, "mdmem returns at most 100 results")
    else:
        m.add(where, "mapped", top_k, m.put("query.maxResults", top_k), top_k)
    _embedding(m, at, store.get("embedding"), strategy == "fts-only")


def _embedding(m: Mapper, at: str, emb: dict[str, Any] | None, keywords_only: bool) -> None:
    where = f"{at}.embedding"
    if emb is None:
        if not keywords_only:
            m.add(
                where,
                "defaulted",
                None,
                f"{MS}.provider",
                "auto",
                "the local model when present, else OpenAI with OPENAI_API_KEY, else keywords only",
            )
        return
    if keywords_only:
        m.add(where, "ignored", emb, note="search.strategy fts-only uses no embeddings")
        return
    ref, model, dims = emb["provider_ref"], emb["model"], emb["dimensions"]
    if ref in PROVIDERS:
        provider = ref
        m.add(f"{where}.provider_ref", "mapped", ref, m.put("provider", ref), ref, "mdmem's provider of that name")
    else:
        provider = "local" if is_local_model(model) else "openai"
        note = f"inferred from the model; {ref!r} names a Provider primitive mdmem does not read: " + (
            "the model file is run here"
            if provider == "local"
            else "the endpoint is memorySearch.remote.baseUrl (default OpenAI's), "
            "the key OPENAI_API_KEY or remote.apiKey"
        )
        m.add(f"{where}.provider_ref", "mapped", ref, m.put("provider", provider), provider, note)
    defaults = {"local": (DEFAULT_LOCAL_MODEL,), "openai": (DEFAULT_REMOTE_MODEL,), "hash": (HASH_MODEL,)}
    if model in defaults.get(provider, (DEFAULT_LOCAL_MODEL, DEFAULT_REMOTE_MODEL)):
        m.add(f"{where}.model", "checked", model, note="the provider's default model (memorySearch.model left unset)")
    elif provider == "local":
        m.add(f"{where}.model", "mapped", model, m.put("local.modelPath", model), model, "a GGUF file or hf: URI")
    else:
        m.add(f"{where}.model", "mapped", model, m.put("model", model), model)
    where = f"{where}.dimensions"
    own = {"openai": KNOWN_DIMS.get(model), "hash": HASH_DIMS}.get(provider)
    if provider in ("local", "auto"):
        m.add(where, "checked", dims, note="a local model's size is its own (the index records it)")
    elif own == dims:
        m.add(where, "checked", dims, note="the model's own size")
    else:
        note = "asked of the endpoint (text-embedding-3 models shorten their vectors)" if provider == "openai" else ""
        m.add(where, "mapped", dims, m.put("remote.dimensions", dims), dims, note)


def workspace(m: Mapper, at: str, store: dict[str, Any]) -> None:
    m.add(f"{at}.type", "mapped", "workspace", note="the agent's Markdown files (MEMORY.md, memory/)")
    backend = store.get("backend")
    if backend not in (None, "filesystem"):
        m.add(f"{at}.backend", "unsupported", backend, note="a workspace is a folder of Markdown files (filesystem)")
    elif backend:
        m.add(f"{at}.backend", "checked", backend)
    isolation = store.get("isolation")
    shared = isolation == "shared"
    if "path" in store:
        m.workspace = m.path(store["path"], f"{at}.path")
        target = m.defaults if shared else m.entry
        key = "agents.defaults.workspace" if shared else "agents.list[0].workspace"
        target["workspace"] = m.workspace
        m.add(f"{at}.path", "mapped", store["path"], key, m.workspace)
    else:
        m.add(f"{at}.path", "defaulted", None, "agents.defaults.workspace", "~/clawd")
    if isolation == "per-channel":
        m.add(
            f"{at}.isolation",
            "unsupported",
            isolation,
            note="a workspace is per agent, not per channel: mapped as per-identity",
        )
    elif isolation is not None:
        note = "every agent without a workspace of its own uses it" if shared else "this agent's own workspace"
        m.add(f"{at}.isolation", "mapped", isolation, note=note)


def conversation(m: Mapper, at: str, store: dict[str, Any]) -> None:
    key = m.put("sources", ["memory", "sessions"])
    m.add(
        f"{at}.type",
        "mapped",
        "conversation",
        key,
        ["memory", "sessions"],
        "retained turns, <workspace>/sessions/*.md, are searched with the memory files",
    )
    backend = store.get("backend")
    index = "postgresql" if m.ms.get("store", {}).get("backend") == "postgres" else "sqlite"
    if backend in (None, "filesystem") or backend in (index, {"sqlite": "sqlite-vec", "postgresql": "pgvector"}[index]):
        if backend:
            m.add(
                f"{at}.backend", "checked", backend, note="Markdown files in sessions/, indexed with the memory files"
            )
    else:
        m.add(
            f"{at}.backend",
            "unsupported",
            backend,
            note=f"conversations are Markdown in sessions/, indexed in the agent's one index ({index})",
        )
    if "path" in store:
        sessions = os.path.join(m.workspace or "~/clawd", "sessions")
        if m.path(store["path"], f"{at}.path") == sessions:
            m.add(f"{at}.path", "checked", store["path"])
        else:
            m.add(
                f"{at}.path",
                "unsupported",
                store["path"],
                note=f"mdmem keeps conversations in <workspace>/sessions ({sessions})",
            )
    for key in ("retention", "forgetting"):
        if key in store:
            m.add(
                f"{at}.{key}",
                "unsupported",
                store[key],
                note="sessions/ files are kept: the lifecycle moves only memory/ files "
                "(declare it on the semantic store)",
            )
