"""Watch a workspace's memory files with watchdog; every relevant event marks the index dirty.

Watched: the workspace folder itself (not recursively: ``MEMORY.md``, ``memory.md`` and the appearance of
``memory/``), ``memory/`` recursively (new subfolders included) and each ``extraPaths`` entry. The handler
never embeds or touches the index: it calls ``on_change(path)`` and a ``SyncService`` debounces. Native
watching (inotify, FSEvents...) falls back to a polling observer when it is unavailable: watch or instance
limits (ENOSPC, EMFILE), or a network filesystem where change events are not delivered.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from mdmemory.errors import MdMemoryError
from mdmemory.workspace import MEMORY_DIR, Workspace

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "fuse.sshfs",
        "fuse.rclone",
        "davfs",
        "fuse.davfs2",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "vboxsf",
        "virtiofs",
    }
)
POLL_INTERVAL_SECONDS = 1.0
ObserverFactory = Callable[[], BaseObserver]


def is_editor_temp(name: str) -> bool:
    """Editor lock, swap and backup files that look like Markdown but are not memory."""
    return (
        name.startswith((".#", "#", "~$"))
        or name.endswith(("~", ".swp", ".swx", ".swo", ".tmp", ".bak", ".part"))
        or "___jb_" in name
        or name == "4913"
    )


def filesystem_type(path: Path) -> str | None:
    """The filesystem type of the mount holding ``path`` (Linux /proc/mounts), or None if unknown."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, best_type = mount, parts[2]
    return best_type


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: MemoryWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type == "modified":
            return  # a folder's own metadata: the file events inside it are what matter
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                self.watcher._event(Path(os.fsdecode(raw)), event.is_directory)


class MemoryWatcher:
    """Observes one workspace. ``mode`` is ``"native"`` or ``"polling"`` once started."""

    def __init__(
        self,
        workspace: Workspace,
        on_change: Callable[[str | None], None],
        *,
        polling: bool | None = None,
        native_factory: ObserverFactory = Observer,
    ) -> None:
        self.workspace = workspace
        self.on_change = on_change
        self.force_polling = polling
        self.native_factory = native_factory
        self.mode: str | None = None
        self.fallback_reason: str | None = None
        self._observer: BaseObserver | None = None
        self._handler: _Handler | None = None
        self._memory_watched = False
        self._lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        root = self.workspace.root
        if not root.is_dir():
            raise MdMemoryError(f"workspace {root} does not exist: create it or fix agents.*.workspace")
        use_polling = self.force_polling
        if use_polling is None:
            fs = filesystem_type(root)
            if fs in NETWORK_FILESYSTEMS:
                use_polling = True
                self.fallback_reason = f"{root} is on a network filesystem ({fs}): change events are unreliable"
        if not use_polling:
            try:
                self._start_observer(self.native_factory(), "native")
                return
            except OSError as exc:
                self.fallback_reason = _native_failure(exc)
        self._start_observer(PollingObserver(timeout=POLL_INTERVAL_SECONDS), "polling")

    def stop(self) -> None:
        """Stop and join the observer threads; safe to call twice."""
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(10)

    def is_alive(self) -> bool:
        observer = self._observer
        return observer is not None and observer.is_alive()

    def restart(self) -> None:
        """Replace a dead observer (the daemon's supervisor calls this) and resync what was missed."""
        self.stop()
        self.start()
        self.on_change(None)

    # -- internals -----------------------------------------------------------------------------------
    def _start_observer(self, observer: BaseObserver, mode: str) -> None:
        self._memory_watched = False
        handler = _Handler(self)
        with self._lock:
            self._observer, self._handler = observer, handler
        try:
            observer.schedule(handler, str(self.workspace.root), recursive=False)
            self._schedule_memory_dir(observer, handler)
            for extra in self.workspace.extra_roots:
                if extra.is_dir():
                    observer.schedule(handler, str(extra), recursive=True)
                elif extra.parent.is_dir() and extra.parent != self.workspace.root:
                    observer.schedule(handler, str(extra.parent), recursive=False)
            observer.start()
        except BaseException:
            with self._lock:
                self._observer = None
            with contextlib.suppress(Exception):
                observer.stop()
            raise
        self.mode = mode

    def _schedule_memory_dir(self, observer: BaseObserver, handler: _Handler) -> None:
        memory_dir = self.workspace.root / MEMORY_DIR
        if not self._memory_watched and memory_dir.is_dir() and not memory_dir.is_symlink():
            observer.schedule(handler, str(memory_dir), recursive=True)
            self._memory_watched = True

    def _event(self, path: Path, is_directory: bool) -> None:
        root = self.workspace.root
        if is_directory:
            if path == root / MEMORY_DIR and not self._memory_watched:
                observer, handler = self._observer, self._handler
                if observer is not None and handler is not None:
                    try:
                        self._schedule_memory_dir(observer, handler)
                    except OSError:
                        pass  # the periodic reconcile still catches files written there
                self.on_change(None)
            elif self.workspace.is_memory_path(path / "x.md"):
                self.on_change(None)  # a folder appeared, vanished or moved: reconcile everything below it
            return
        if is_editor_temp(path.name) or not self.workspace.is_memory_path(path):
            return
        self.on_change(self.workspace.rel(path))


def _native_failure(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return f"inotify watch limit reached ({exc}): raise fs.inotify.max_user_watches"
    if exc.errno == errno.EMFILE:
        return f"inotify instance limit reached ({exc}): raise fs.inotify.max_user_instances"
    return f"native file watching is unavailable ({exc})"
