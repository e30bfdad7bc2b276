"""mdmem: durable Markdown memory for AI agents.

``from mdmem import Memory``; see the README for the tool contract. ``Memory`` is imported on first use
(PEP 562), so a command that only reads a file does not pay for the index, the models and numpy.
"""

from typing import TYPE_CHECKING, Any

from mdmem.util import moved
from mdmem.util.errors import ConfigError, MdMemoryError, ProviderError, StoreError, WorkspaceError

if TYPE_CHECKING:
    from mdmem.memory import Memory

moved.install()  # old module paths, for one release (mdmem.util.moved)

__version__ = "0.2.0"

__all__ = ["ConfigError", "MdMemoryError", "Memory", "ProviderError", "StoreError", "WorkspaceError", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from mdmem.memory import Memory

        return Memory
    raise AttributeError(f"module 'mdmem' has no attribute {name!r}")
