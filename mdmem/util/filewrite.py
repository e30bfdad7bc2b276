"""Writing in an agent's workspace and nowhere else.

Every write mdmem makes in a workspace (retained turns and their tombstones, forget's rewrites, transcript
copies, ``remember``, the lock files beside them) goes through a ``Folder``: opened one path component at a
time, each relative to the one before with ``O_NOFOLLOW | O_DIRECTORY`` (``openat``), from the workspace
down. A symlink on the way, to outside the workspace or not, is refused before anything is written, with an
error naming it and where it points (readers never follow symlinks either, so nothing written through one
would ever be found). Files are then opened, created, renamed and locked by name relative to the folder's
descriptor (``mdmem.util.fileread.open_regular``: never a symlink, a FIFO or a hard link), so a folder swapped
for a symlink after the check is not followed. The workspace folder itself may be a symlink: it is where the
configuration points.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from mdmem.util.errors import LockError, WorkspaceError
from mdmem.util.fileread import open_regular, special_kind

if TYPE_CHECKING:
    from filelock import FileLock

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Folder:
    """A folder inside a workspace, held open by its descriptor (``with Folder(...) as f``)."""

    def __init__(self, root: Path | str, parts: Sequence[str], *, create: bool = False) -> None:
        self.root = Path(root)
        self.parts = tuple(parts)
        self.path = self.root.joinpath(*self.parts)
        self.fd = _open_folder(self.root, self.parts, create)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def shown(self, name: str) -> str:
        """How messages name the file ``name`` of this folder: its path."""
        return str(self.path / name)

    # -- reading ------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """The names of the regular files of the folder that are not symlinks, sorted."""
        out = []
        with os.scandir(self.fd) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False):
                        out.append(entry.name)
        return sorted(out)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes | None:
        """The bytes of the file ``name`` (a regular file with one link); None when it does not exist."""
        try:
            fd = open_regular(name, shown=self.shown(name), dir_fd=self.fd)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    # -- writing ------------------------------------------------------------------------------------
    def open(self, name: str, flags: int, mode: int = 0o644) -> int:
        """``open_regular`` of ``name`` in this folder: never a symlink, a special file or a hard link."""
        return open_regular(name, flags, mode, shown=self.shown(name), dir_fd=self.fd)

    def replace(self, name: str, data: bytes) -> None:
        """Make ``name`` hold ``data`` atomically: a temporary file beside it, ``fsync``, ``rename``, ``fsync``
        of the folder. The file keeps its permission bits."""
        st = self.lstat(name)
        if st is not None and (kind := special_kind(st)) is not None:
            raise WorkspaceError(f"{self.shown(name)} is {kind}, not a regular file: mdmem never writes it")
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        tmp = self._written_aside(name, data, mode)
        try:
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        self.sync()

    def create(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Make the new file ``name`` hold ``data``, whole or not at all, never replacing a file: a temporary
        file beside it, ``fsync``, then a hard link to ``name`` (``FileExistsError`` when something is there,
        even if it appeared meanwhile), ``fsync`` of the folder."""
        tmp = self._written_aside(name, data, mode)
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
        self.sync()

    def _written_aside(self, name: str, data: bytes, mode: int) -> str:
        """A temporary file beside ``name`` holding ``data``, fsynced: its name (removed again on failure)."""
        tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=self.fd)  # left by a crash
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        return tmp

    def truncate(self, name: str, size: int) -> None:
        fd = self.open(name, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync(self) -> None:
        """Make the folder's new or renamed entries durable (a no-op where folders cannot be fsynced)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    def lock(self, name: str, timeout: float) -> FileLock:
        """The cross-process lock file ``name`` of this folder, acquired; refused (``WorkspaceError``) when it
        is a symlink or not a regular file: taking a lock opens, and older versions of filelock truncate, it."""
        from filelock import FileLock, Timeout  # here: importing filelock costs more than most commands

        st = self.lstat(name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise WorkspaceError(
                f"the lock file {self.shown(name)} is {special_kind(st) or 'not a regular file'}: mdmem never "
                "opens it. Fix: delete it (mdmem makes it again)"
            )
        lock = FileLock(self.shown(name))
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise LockError(
                f"{self.shown(name)} stayed locked by another process for {timeout:g} s. Fix: retry, or stop it"
            ) from None
        except OSError as exc:
            raise WorkspaceError(f"cannot take the lock file {self.shown(name)}: {exc.strerror or exc}") from None
        return lock

    @contextlib.contextmanager
    def locked(self, name: str, timeout: float) -> Iterator[None]:
        lock = self.lock(name, timeout)
        try:
            yield
        finally:
            lock.release()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_folder(root: Path, parts: Sequence[str], create: bool) -> int:
    """The descriptor of ``root/parts...`` with no symlink below ``root`` (see the module docstring)."""
    fd = os.open(root, _DIR_FLAGS)
    here = root
    try:
        for part in parts:
            here = here / part
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise WorkspaceError(
                        f"cannot create the folder {here}: {exc.strerror or exc}. Fix: make the workspace writable"
                    ) from None
            try:
                inner = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise _refused(root, here, part, fd, exc) from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refused(root: Path, here: Path, part: str, fd: int, exc: OSError) -> WorkspaceError:
    try:
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        target = os.readlink(part, dir_fd=fd)
        real = Path(os.path.realpath(here))
        where = "inside" if real.is_relative_to(os.path.realpath(root)) else "outside"
        return WorkspaceError(
            f"{here} is a symlink to {target} ({where} the workspace {root}): mdmem writes only inside the "
            "agent's workspace and never through a symlink; nothing was written. Fix: replace the symlink with "
            "a real folder (move what it points to into it), or point the agent's `workspace` elsewhere"
        )
    what = None if st is None else "a file" if stat.S_ISREG(st.st_mode) else special_kind(st)
    reason = f"is {what}" if what else f"cannot be opened ({exc.strerror or exc})"
    return WorkspaceError(f"{here} {reason}, not a folder: nothing was written. Fix: make it a folder")
