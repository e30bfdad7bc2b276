"""What differs between two index identities (the provider, model, dimensions, provider settings, chunking,
schema an index was built for, ``Indexer.identity``), said as ``index built for X, config says Y``."""

from __future__ import annotations

from typing import Any

_GROUPS = (
    ("provider", "model"),
    ("dims",),
    ("providerKey",),
    ("chunkTokens", "chunkOverlap", "windowTokens"),
    ("windowVectors",),
    ("schema", "chunker"),
)


def identity_change(stored: dict[str, Any], current: dict[str, Any]) -> str:
    """``index built for X, config says Y``, naming only what differs."""
    was: list[str] = []
    now: list[str] = []
    for keys in _GROUPS:
        if all(stored.get(k) == current.get(k) for k in keys):
            continue
        if current.get("dims") is None and keys == ("dims",):
            continue
        was.append(_describe(keys, stored))
        now.append(_describe(keys, current))
    return f"index built for {', '.join(was) or 'another configuration'}, config says {', '.join(now) or '?'}"


def _describe(keys: tuple[str, ...], identity: dict[str, Any]) -> str:
    if keys == ("provider", "model"):
        provider = identity.get("provider") or "none"
        return "keyword-only (no provider)" if provider == "none" else f"{provider} {identity.get('model')}"
    if keys == ("chunkTokens", "chunkOverlap", "windowTokens"):
        return "chunking {}/{} tokens, windows {}".format(*(identity.get(k) for k in keys))
    if keys == ("windowVectors",):
        return f"window vectors {identity.get('windowVectors') or 'separate'}"
    if keys == ("providerKey",):
        return f"provider settings {str(identity.get('providerKey'))[:8]}"
    return ", ".join(f"{k} {identity.get(k)}" for k in keys)
