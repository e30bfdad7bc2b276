"""mdmemory: durable Markdown memory for AI agents.

``from mdmemory import Memory``; see the README for the tool contract. ``Memory`` is imported on first use
(PEP 562), so a command that only reads a file does not pay for the index, the models and numpy.
"""

from typing import TYPE_CHECKING, Any

from mdmemory.util import moved
from mdmemory.util.errors import ConfigError, MdMemoryError, ProviderError, StoreError, WorkspaceError

if TYPE_CHECKING:
    from mdmemory.memory import Memory

moved.install()  # old module paths, for one release (mdmemory.util.moved)

__version__ = "0.1.0"

__all__ = ["ConfigError", "MdMemoryError", "Memory", "ProviderError", "StoreError", "WorkspaceError", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from mdmemory.memory import Memory

        return Memory
    raise AttributeError(f"module 'mdmemory' has no attribute {name!r}")
