"""Exception hierarchy. Every message says what went wrong and how to fix it.

This module imports nothing from the rest of the package.
"""

from __future__ import annotations

from typing import Any


class MdMemoryError(Exception):
    """Base class for every error mdmemory raises on purpose."""


class ConfigError(MdMemoryError):
    """The configuration file or an override is invalid.

    ``key`` is the dotted key path (``agents.defaults.memorySearch.query.minScore``) when one applies.
    """

    def __init__(self, message: str, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + message)


class WorkspaceError(MdMemoryError):
    """A path is not an allowed memory file (traversal, symlink, outside the workspace...)."""


class StoreError(MdMemoryError):
    """The SQLite index cannot be opened or used (missing extension, corrupt file...)."""


class ProviderError(MdMemoryError):
    """An embedding provider cannot be created or failed permanently."""


class TransientProviderError(ProviderError):
    """A provider call failed in a way worth retrying (429, 5xx, timeout, connection reset).

    ``retry_after`` is the server's requested delay in seconds, if it gave one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class LockError(MdMemoryError):
    """Another process holds the writer lock for this index."""


class SyncCancelled(MdMemoryError):
    """A sync stopped early because the process is shutting down; every file written is complete."""


class EmbeddingsPending(ProviderError):
    """A sync indexed every changed file's text, but the provider failed before all chunks were embedded.

    The text is searchable by keyword at once; the ``pending`` chunks get their vectors on a later sync.
    ``cause`` is the provider's error; ``report`` the sync report (a dict).
    """

    def __init__(self, pending: int, cause: str, report: dict[str, Any]) -> None:
        self.pending = pending
        self.cause = cause
        self.report = report
        super().__init__(
            f"{pending} chunk(s) are waiting for embeddings: {cause.rstrip('. ')}. Their text is indexed and found "
            "by keyword search meanwhile; the next sync embeds them once the provider answers"
        )
