"""mdmemory: durable Markdown memory for AI agents.

``from mdmemory import Memory``; see the README for the tool contract.
"""

from mdmemory.errors import ConfigError, MdMemoryError, ProviderError, StoreError, WorkspaceError
from mdmemory.memory import Memory

__version__ = "0.1.0"

__all__ = ["ConfigError", "MdMemoryError", "Memory", "ProviderError", "StoreError", "WorkspaceError", "__version__"]
