"""Atomic index swaps: a rebuild writes a new database beside the live one, then a symlink flips.

The store path (``main.sqlite``) is the live index: at first a regular file, after the first rebuild a
symlink to a generation file (``main.sqlite.g2``). SQLite resolves the symlink, so each generation keeps
its own ``-wal``/``-shm`` files and connections still open on the old generation keep reading a complete,
consistent index until they notice the flip (``Store.refresh``) and reopen. A rebuild that fails or is
killed never touches the live index; its leftovers are removed by the next writer.

Only exact names count as this index's: ``<name>.g<digits>`` and ``.<name>.swap-<digits>``. Another index in
the same folder may have a name that starts with this one's (an agent ``main.sqlite.g1`` beside ``main``:
``main.sqlite.g1.sqlite``, and its generations ``main.sqlite.g1.sqlite.g2``); its files are never taken for
ours, so one index's tidying cannot delete another's.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
from pathlib import Path

from mdmem.store.connection import remove_database


def _generation_number(path: Path, sibling: str) -> int | None:
    """N when ``sibling`` is exactly ``<path.name>.g<N>``, else None."""
    m = re.fullmatch(re.escape(path.name) + r"\.g(\d+)", sibling)
    return int(m.group(1)) if m else None


def _is_swap_link(path: Path, sibling: str) -> bool:
    return re.fullmatch(re.escape(f".{path.name}.swap-") + r"\d+", sibling) is not None


def live_file(path: Path) -> Path:
    """The database file the store path currently points at."""
    return Path(os.path.realpath(path))


def next_generation(path: Path) -> Path:
    """A fresh generation file name beside ``path`` (``<name>.g<N>``), never the live one."""
    numbers = [0]
    for sibling in path.parent.glob(f"{glob.escape(path.name)}.g*"):
        n = _generation_number(path, sibling.name)
        if n is not None:
            numbers.append(n)
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
    for sibling in path.parent.glob(f"{glob.escape(path.name)}.g*"):
        if _generation_number(path, sibling.name) is not None and sibling.resolve() != live:
            remove_database(sibling)
            removed.append(sibling)
    for link in path.parent.glob(f".{glob.escape(path.name)}.swap-*"):
        if not _is_swap_link(path, link.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
            removed.append(link)
    return removed
