"""What each field of a CKP declaration became: the report of ``mdmem ckp import`` (and of export's notes), and
the facts both directions share (mdmem's names for CKP's values, durations, path templates)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["mapped", "defaulted", "unsupported", "ignored", "checked"]
STATUSES: tuple[Status, ...] = ("mapped", "defaulted", "unsupported", "ignored", "checked")
"""``mapped``: the field sets ``key`` to ``value``; ``defaulted``: the declaration leaves it out and mdmem's
default stands (``key``, ``value``); ``unsupported``: declared, but mdmem cannot do it (``note`` says why and
what it does instead); ``ignored``: a hint CKP lets a runtime ignore, or metadata; ``checked``: valid, and
already what mdmem does (nothing to configure)."""

MS = "agents.defaults.memorySearch"
DAILY_TIER = {"name": "daily", "paths": ["memory/????-??-??.md"]}
# The embedding models whose default size mdmem knows (mdmem.providers.remote.KNOWN_MODELS; a test keeps both
# equal: config may not import providers).
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
HASH_MODEL, HASH_DIMS = "feature-hash-v1", 384  # mdmem.providers.hashing's defaults
PROVIDERS = ("auto", "local", "openai", "hash")
"""mdmem's embedding providers, as ``embedding.provider_ref`` names them on export (and is read on import)."""
TEMPLATE = re.compile(r"\{([^{}]*)\}")
COGNITIVE = "an optional cognitive hint: CKP 0.3.0 lets a runtime ignore it (spec 5.6)"


@dataclass(frozen=True)
class Field:
    """One field of a declaration and what became of it (see ``Status``). ``value`` is the declaration's."""

    path: str
    status: Status
    value: Any = None
    key: str | None = None
    set: Any = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "status": self.status}
        if self.value is not None:
            out["value"] = self.value
        if self.key is not None:
            out.update(key=self.key, set=self.set)
        if self.note:
            out["note"] = self.note
        return out


def duration_days(text: str) -> tuple[int, bool]:
    """A CKP duration (``90d``, ``24h``, ``30m``, ``90s``) in whole days, rounded up, and whether it was exact."""
    seconds = int(text[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86_400}[text[-1]]
    days = math.ceil(seconds / 86_400)
    return days, days * 86_400 == seconds


def is_local_model(model: str) -> bool:
    """A model mdmem's local provider runs (a GGUF file or an ``hf:`` URI), not a remote model's name."""
    return model.startswith("hf:") or model.lower().endswith(".gguf")


def counts(fields: list[Field]) -> dict[str, int]:
    return {s: sum(1 for f in fields if f.status == s) for s in STATUSES}
