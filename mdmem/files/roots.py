"""What a sync does about a missing root: the workspace, ``memory/`` or an ``extraPaths`` entry gone.

The rule (README, "Which files are memory"): an index is never emptied because a folder is absent.

- The workspace does not exist, is not a folder or cannot be read: every sync stops with a
  ``WorkspaceError`` naming the path and the fix, and the index is left as it was (searches answer from it,
  with a warning). ``--prune`` does not change that: fix the path, or delete the index.
- The workspace exists but is empty while the index holds files from it (an unmounted drive leaves an empty
  mount point): the same error, unless the sync prunes (``mdmem index --prune`` or ``--force``).
- ``memory/`` or an ``extraPaths`` entry is absent: the indexed files under it are kept ("root missing")
  and reported until it returns; a sync that prunes drops them. A rebuild that does not prune (the index
  identity changed: another provider or model) stops with an error instead of dropping them.
- A single file deleted under a root that is present is removed from the index, as always.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from mdmem.files.workspace import EMPTY, MissingRoot
from mdmem.util.errors import WorkspaceError

PRUNE_HINT = "run `mdmem index --prune` to drop them from the index"


def held_paths(missing: Sequence[MissingRoot], indexed: Iterable[str]) -> dict[MissingRoot, list[str]]:
    """The indexed paths under each missing root (roots holding none are left out)."""
    paths = list(indexed)
    out: dict[MissingRoot, list[str]] = {}
    for root in missing:
        under = [p for p in paths if root.holds(p)]
        if under:
            out[root] = under
    return out


def kept(missing: Sequence[MissingRoot], indexed: Iterable[str]) -> set[str]:
    """Indexed paths that a sync keeps although they are not on disk (their root is missing)."""
    return {p for paths in held_paths(missing, indexed).values() for p in paths}


def guard(missing: Sequence[MissingRoot], indexed: Collection[str], *, prune: bool, rebuild: bool) -> set[str]:
    """Check that a sync may go on; return the indexed paths it must keep. Raises ``WorkspaceError``."""
    held = held_paths(missing, indexed)
    for root in missing:
        if root.kind == "workspace" and root.reason != EMPTY:
            raise WorkspaceError(_workspace_gone(root, len(indexed)))
    if prune:
        return set()
    for root, paths in held.items():
        if root.kind == "workspace":
            raise WorkspaceError(
                f"workspace {root.shown} is empty, but the index holds {len(paths)} file(s) from it (an "
                "unmounted drive?); nothing was changed. Fix: mount or restore the folder, or, if you emptied "
                "it on purpose, " + PRUNE_HINT
            )
        if rebuild:
            raise WorkspaceError(
                f"{_name(root)} {root.reason}, and the index holds {len(paths)} file(s) under it that a rebuild "
                f"would drop; nothing was changed. Fix: restore {root.shown}, or {PRUNE_HINT}"
            )
    return {p for paths in held.values() for p in paths}


def warnings(missing: Sequence[MissingRoot], indexed: Iterable[str]) -> list[str]:
    """What status and search say about missing roots."""
    held = held_paths(missing, indexed)
    out: list[str] = []
    for root in missing:
        n = len(held.get(root, ()))
        if root.kind == "workspace" and root.reason != EMPTY:
            out.append(_workspace_gone(root, n, searching=True))
        elif n:
            out.append(
                f"{_name(root)} {root.reason} (root missing): its {n} indexed file(s) are kept until it returns; "
                f"restore it, or {PRUNE_HINT}"
            )
        elif root.kind == "extra":
            out.append(f"{_name(root)} {root.reason}: nothing is indexed from it; fix memorySearch.extraPaths")
    return out


def _name(root: MissingRoot) -> str:
    if root.kind == "workspace":
        return f"workspace {root.shown}"
    return f"extraPaths entry {root.shown}" if root.kind == "extra" else root.shown


def _workspace_gone(root: MissingRoot, files: int, *, searching: bool = False) -> str:
    effect = "answering from the last index" if searching else "nothing was changed in the index"
    return (
        f"workspace {root.shown} {root.reason} (a typo, an unmounted drive, a moved folder?): {effect} "
        f"({files} file(s) kept). Fix: create or mount the folder, or point the agent's `workspace` "
        "(agents.defaults.workspace, agents.list[].workspace or MDMEMORY_WORKSPACE) at the right one"
    )
