"""Small file-system helpers shared by the flush state and ``remember``."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    """Make a new or renamed directory entry durable; a no-op where directories cannot be fsynced."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename or create itself already happened
    finally:
        os.close(fd)
