"""The sync report: what one sync of an index did (mdmem.index.indexer, the replica's mdmem.index.replica)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mdmem.config.load import camel


@dataclass
class SyncReport:
    """What one sync did. ``files`` counts memory files found on disk.

    ``pending``: chunks indexed for keywords whose vectors are still missing after the sync;
    ``deferred``: changed files left for a later sync because the time budget ran out;
    ``embed_error``: the provider error that stopped embedding, if one did.
    """

    files: int = 0
    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    embedded: int = 0
    from_cache: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    held: int = 0  # indexed files kept because their folder is missing (mdmem.files.roots)
    rebuilt: bool = False
    pending: int = 0
    deferred: int = 0
    embed_error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, camelCase like every JSON mdmem emits (``fromCache``)."""
        return {camel(k): v for k, v in asdict(self).items()}
