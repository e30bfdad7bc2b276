"""Atomic index swaps: a rebuild writes a new database beside the live one, then a symlink flips.

The store path (``main.sqlite``) is the live index: at first a regular file, after the first rebuild a
symlink to a generation file (``main.sqlite.g2``). SQLite resolves the symlink, so each generation keeps
its own ``-wal``/``-shm`` files and connections still open on the old generation keep reading a complete,
consistent index until they notice the flip (``Store.refresh``) and reopen. A rebuild that fails or is
killed never touches the live index; its leftovers are removed by the next writer.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from mdmemory.store.connection import remove_database

_GEN = re.compile(r"\.g(\d+)$")


def live_file(path: Path) -> Path:
    """The database file the store path currently points at."""
    return Path(os.path.realpath(path))


def next_generation(path: Path) -> Path:
    """A fresh generation file name beside ``path`` (``<name>.g<N>``), never the live one."""
    numbers = [0]
    for sibling in path.parent.glob(f"{path.name}.g*"):
        m = _GEN.search(sibling.name)
        if m:
            numbers.append(int(m.group(1)))
    return path.with_name(f"{path.name}.g{max(numbers) + 1}")


def swap_in(path: Path, new_file: Path) -> None:
    """Make ``path`` point at ``new_file`` in one atomic rename, then delete the old generation's files."""
    was_regular = path.exists() and not path.is_symlink()
    old = live_file(path) if path.exists() else None
    tmp = path.with_name(f".{path.name}.swap-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(new_file.name, tmp)
    os.replace(tmp, path)
    if was_regular:
        # The old index was the regular file at `path`; its name is now the symlink, only its journal
        # files are left (readers that still have it open keep their file descriptors).
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")
    elif old is not None and old != live_file(path):
        remove_database(old)


def remove_orphans(path: Path) -> list[Path]:
    """Delete generation files and swap links that the live index does not use (a killed rebuild)."""
    live = live_file(path)
    removed: list[Path] = []
    for sibling in path.parent.glob(f"{path.name}.g*"):
        if _GEN.search(sibling.name) and sibling.resolve() != live:
            remove_database(sibling)
            removed.append(sibling)
    for link in path.parent.glob(f".{path.name}.swap-*"):
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
            removed.append(link)
    return removed
