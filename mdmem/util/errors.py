"""Exception hierarchy. Every message says what went wrong and how to fix it.

This module imports nothing from the rest of the package.
"""

from __future__ import annotations

from typing import Any


class MdMemoryError(Exception):
    """Base class for every error mdmem raises on purpose."""


class ConfigError(MdMemoryError):
    """The configuration file or an override is invalid.

    ``key`` is the dotted key path (``agents.defaults.memorySearch.query.minScore``) when one applies.
    """

    def __init__(self, message: str, key: str | None = None, source: str | None = None) -> None:
        self.key = key
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + message)


class InvalidArgumentError(MdMemoryError, ValueError):
    """An argument of an API call or command is invalid (an empty query, ``max_results`` out of range...).

    Also a ``ValueError``, so Python callers can catch it as one; the command line exits with code 2.
    """


class WorkspaceError(MdMemoryError):
    """A path is not an allowed memory file (traversal, symlink, outside the workspace...), or the
    workspace itself is missing."""


class SpecialFileError(WorkspaceError, OSError):
    """A memory path is not a regular file with one link (a FIFO, a device, a socket, a hard link).

    Also an ``OSError``, so code that skips unreadable files skips these too.
    """


class StoreError(MdMemoryError):
    """The SQLite index cannot be opened or used (missing extension, corrupt file...).

    ``kind`` says what went wrong, so callers can react without parsing the message: ``full`` (no space
    left), ``read-only`` (the file or folder cannot be written), ``corrupt`` (the file is damaged: rebuild
    it from the memory files), ``foreign`` (not an mdmem index: ``index --force`` moves it aside), ``schema``
    (a schema version this process cannot use), ``io`` or ``error``.
    """

    def __init__(self, message: str, *, kind: str = "error") -> None:
        self.kind = kind
        super().__init__(message)


class ProviderError(MdMemoryError):
    """An embedding provider cannot be created or failed permanently."""


class TransientProviderError(ProviderError):
    """A provider call failed in a way worth retrying (429, 5xx, timeout, connection reset).

    ``retry_after`` is the server's requested delay in seconds, if it gave one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class InputRejected(ProviderError):
    """The provider refused this input (too long, too large); other inputs may pass, so it is not a sign of an
    outage and the circuit breaker does not count it."""


class ProviderPaused(ProviderError):
    """The provider's circuit breaker is open: it failed recently, so calls are refused at once until ``until``.

    ``until`` is a Unix time; ``reason`` is the failure that opened the breaker (never holds a secret).
    """

    def __init__(self, message: str, until: float, reason: str) -> None:
        self.until = until
        self.reason = reason
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
