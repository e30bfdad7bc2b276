"""Which workspace an index belongs to, across hosts: an id kept in the workspace itself.

On PostgreSQL one database holds the indexes of agents on many hosts, keyed by agent id. Two hosts that
index the same agent id from different workspaces would replace each other's rows, and a search on one
would answer from the other's notes; so the database records which workspace an agent's index belongs to
(mdmem.store.pg.claims) and every other workspace is refused. What names a workspace:

- ``.mdmemory/workspace-id`` in the workspace: 32 random hex digits, made by the first mdmem process
  that needs it (atomically: racing processes end with one id). Replicas that mount the same workspace
  (a shared volume), at any path on any host, read the same id: they are the same workspace. A copy made
  with the folder (``cp -r``) is the same workspace too; delete the file in a copy meant to be another one.
  ``.mdmemory/.gitignore`` keeps the id out of git: a clone is a workspace of its own.
- A workspace where it cannot be made (a read-only mount) is named by its host and real path
  (``path:`` and a hash of both): create the file once where the volume is writable to share it.
- A workspace that cannot be read now (unmounted, missing) has no id (``id`` None): it is recognised by
  the host and path the database recorded with the claim, so a search on its host still answers from
  the last index while it is away. So is one whose id file is damaged, for searches (``by_path``);
  writing needs the id, and the error names the file and the fix.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from mdmem.util.errors import WorkspaceError

ID_DIR = ".mdmemory"
ID_FILE = "workspace-id"
_ID = re.compile(r"^[0-9a-f]{32}$")
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class WorkspaceIdentity:
    """A workspace as seen from this host: its ``id`` (None while it cannot be read), host and real path."""

    id: str | None
    host: str
    path: str

    def shown(self) -> str:
        return f"{self.path} on host {self.host}"


def by_path(workspace: Path) -> WorkspaceIdentity:
    """``workspace`` by its host and real path alone: what a search has of one whose id cannot be read."""
    return WorkspaceIdentity(None, socket.gethostname(), os.path.realpath(workspace))


def identify(workspace: Path) -> WorkspaceIdentity:
    """The identity of ``workspace``, making its id file when it has none (see the module docstring).

    Raises ``WorkspaceError`` naming the file when ``.mdmemory`` or the id file is not what mdmem made
    (a symlink, another kind of file, a changed id), with the fix."""
    host = socket.gethostname()
    path = os.path.realpath(workspace)
    if not os.path.isdir(path):
        return WorkspaceIdentity(None, host, path)
    folder = os.path.join(path, ID_DIR)
    try:
        made = _read(folder) or _make(folder)
    except OSError as exc:
        if exc.errno in _READ_ONLY:
            digest = hashlib.sha256(f"{host}\0{path}".encode()).hexdigest()[:32]
            return WorkspaceIdentity(f"path:{digest}", host, path)
        if exc.errno == errno.ENOENT:  # the workspace went away meanwhile
            return WorkspaceIdentity(None, host, path)
        raise WorkspaceError(f"cannot read or make {os.path.join(folder, ID_FILE)}: {exc}") from None
    return WorkspaceIdentity(made, host, path)


def _read(folder: str) -> str | None:
    """The id in ``folder``'s id file, None when there is none yet."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        raise WorkspaceError(
            f"{folder} is not a folder (a symlink or a file): mdmem keeps the workspace's id in it. "
            "Fix: remove it; mdmem makes the folder again"
        )
    file = os.path.join(folder, ID_FILE)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        fd = -1
    try:
        if fd < 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkspaceError(
                f"{file} is not a regular file. Fix: replace it with a file holding this workspace's id (32 hex "
                "digits; an index in PostgreSQL names the one it was made for), or remove it for a new id"
            )
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        if fd >= 0:
            os.close(fd)
    if not _ID.match(text):
        raise WorkspaceError(
            f"{file} does not hold a workspace id (32 hex digits, as mdmem writes it). Fix: restore it, or "
            "remove it for a new id (a PostgreSQL index recorded for the old one then needs "
            "`mdmem index --take-over`)"
        )
    return text


def _make(folder: str) -> str:
    """Write a new id file in ``folder`` (made as needed); the id that won when another process raced us."""
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass
    else:
        with open(os.path.join(folder, ".gitignore"), "w", encoding="ascii") as fh:
            fh.write("# mdmem: this folder names this copy of the workspace; a clone must not share it\n*\n")
    new = secrets.token_hex(16)
    tmp = os.path.join(folder, f".{ID_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "x", encoding="ascii") as fh:
        fh.write(new + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, os.path.join(folder, ID_FILE))  # never replaces one another process made meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _read(folder) or new
