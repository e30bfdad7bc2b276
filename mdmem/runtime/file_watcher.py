"""Watch a workspace's memory files with watchdog; every relevant event marks the index dirty.

Watched: the workspace folder itself (not recursively: ``MEMORY.md``, ``memory.md`` and the appearance of
``memory/``), ``memory/`` recursively (new subfolders included) and each ``extraPaths`` entry. The handler
never embeds or touches the index: it calls ``on_change(path)`` and a ``SyncService`` debounces. Native
watching (inotify, FSEvents...) falls back to a polling observer when it is unavailable: watch or instance
limits (ENOSPC, EMFILE), or a network filesystem where change events are not delivered.

Watches hang on folders, not names: a folder deleted and recreated, or renamed away and back, is no longer
the one watched. A guard thread notices (folder identities, stopped observer threads) and re-arms; a
workspace that is missing is waited for rather than an error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from mdmem.files.workspace import MEMORY_DIR, Workspace

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
CHECK_SECONDS = 1.0  # how often the guard checks that the watched folders are still the ones watched
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


Identity = tuple[int, int] | None  # (st_dev, st_ino) of a watched folder, None when it is absent


class MemoryWatcher:
    """Observes one workspace, and keeps observing it as its folders come and go.

    ``start`` arms the observer when the workspace exists and otherwise waits for it (``armed`` False,
    ``waiting_for`` its path). A guard thread checks every ``check_seconds`` (and at once after an event on
    a watched folder itself) that the workspace, ``memory/`` and each ``extraPaths`` folder are still the
    folders that are watched: one deleted and recreated, renamed away and back, mounted or unmounted, or
    an observer thread that stopped (watchdog stops an emitter whose folder was deleted and keeps running
    blind) makes it re-arm a fresh observer and call ``on_armed`` (default ``on_change(None)``) so the
    caller resyncs what happened meanwhile; ``on_state`` is called after every such change (armed or
    waiting), before ``on_armed``. ``mode`` is ``"native"`` or ``"polling"`` once armed.
    """

    def __init__(
        self,
        workspace: Workspace,
        on_change: Callable[[str | None], None],
        *,
        polling: bool | None = None,
        native_factory: ObserverFactory = Observer,
        on_armed: Callable[[], None] | None = None,
        on_state: Callable[[], None] | None = None,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self.workspace = workspace
        self.on_change = on_change
        self.on_armed = on_armed
        self.on_state = on_state
        self.force_polling = polling
        self.native_factory = native_factory
        self.check_seconds = check_seconds
        self.mode: str | None = None
        self.fallback_reason: str | None = None
        self.armed = False
        self.waiting_for: str | None = None
        self.rearms = 0  # times the guard re-armed the observer after the folders changed
        self.last_error: str | None = None
        self._observer: BaseObserver | None = None
        self._identities: dict[str, Identity] = {}
        self._lock = threading.Lock()  # guards _observer
        self._arming = threading.Lock()  # one arm or disarm at a time
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._guard: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Arm now, or wait for a missing workspace; start the guard. The caller requests the first sync."""
        self._stopping.clear()
        with self._arming:
            self._arm()
        self._guard = threading.Thread(target=self._run_guard, name="mdmemory-watch-guard", daemon=True)
        self._guard.start()

    def stop(self) -> None:
        """Stop and join the guard and the observer threads; safe to call twice."""
        self._stopping.set()
        self._wake.set()
        guard, self._guard = self._guard, None
        if guard is not None and guard is not threading.current_thread():
            guard.join(10)
        with self._arming:
            self._disarm()

    def is_alive(self) -> bool:
        """The guard runs, and the observer too when armed (a waiting watcher is alive)."""
        guard = self._guard
        with self._lock:
            observer = self._observer
        return guard is not None and guard.is_alive() and (observer is None or observer.is_alive())

    def restart(self) -> None:
        """Replace a dead observer (the daemon's supervisor calls this) and resync what was missed."""
        self.stop()
        self.start()
        self.on_change(None)

    def check(self) -> bool:
        """Re-arm when a watched folder changed or an observer thread stopped; True when it re-armed."""
        with self._arming:
            if self._stopping.is_set():
                return False
            if not self._needs_arming():
                return False
            self._arm()
            if self.armed:
                self.rearms += 1
        if self.on_state is not None:
            self.on_state()
        if self.armed:
            (self.on_armed or (lambda: self.on_change(None)))()
        return True

    def state(self) -> dict[str, object]:
        """What is true now, for the daemon's state file and ``status``."""
        return {
            "armed": self.armed,
            "waitingFor": self.waiting_for,
            "mode": self.mode,
            "fallbackReason": self.fallback_reason,
            "rearms": self.rearms,
            "watchError": self.last_error,
        }

    # -- internals -----------------------------------------------------------------------------------
    def _run_guard(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.check_seconds)
            self._wake.clear()
            try:
                self.check()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - keep guarding; the state file reports it
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _needs_arming(self) -> bool:
        if self._current_identities() != self._identities:
            return True  # a watched folder was replaced, removed or (re)appeared
        if not self.armed:
            return self.waiting_for is None  # not waiting for the workspace: the last arm failed, try again
        with self._lock:
            observer = self._observer
        return observer is None or not (observer.is_alive() and all(e.is_alive() for e in observer.emitters))

    def _current_identities(self) -> dict[str, Identity]:
        root = self.workspace.root
        out = {str(root): _identity(root, follow=True)}
        if out[str(root)] is None:
            return out
        out[str(root / MEMORY_DIR)] = _identity(root / MEMORY_DIR, follow=False)
        for folder, follow in ((self.workspace.sessions_dir, False), (self.workspace.transcripts, True)):
            if folder is not None:  # memorySearch.sources "sessions"
                out[str(folder)] = _identity(folder, follow=follow)
        for extra in self.workspace.extra_roots:
            folder = extra if os.path.isdir(extra) or not _is_md_name(extra) else extra.parent
            out[str(folder)] = _identity(folder, follow=True)
        return out

    def _arm(self) -> None:
        """(Re)build the observer for the folders as they are now; wait when the workspace is absent."""
        self._disarm()
        self.waiting_for = None
        identities = self._current_identities()
        root = self.workspace.root
        if identities[str(root)] is None:
            self._identities, self.waiting_for = identities, str(root)
            return
        self.fallback_reason = None
        use_polling = self.force_polling
        if use_polling is None:
            fs = filesystem_type(root)
            if fs in NETWORK_FILESYSTEMS:
                use_polling = True
                self.fallback_reason = f"{root} is on a network filesystem ({fs}): change events are unreliable"
        try:
            if not use_polling:
                try:
                    self._start_observer(self.native_factory(), "native")
                except (FileNotFoundError, NotADirectoryError):
                    raise
                except OSError as exc:
                    self.fallback_reason = _native_failure(exc)
                    use_polling = True
            if use_polling:
                self._start_observer(PollingObserver(timeout=POLL_INTERVAL_SECONDS), "polling")
        except (FileNotFoundError, NotADirectoryError):  # the workspace went away while arming
            self._identities, self.waiting_for = {}, str(root)
            return
        self._identities, self.armed, self.waiting_for = identities, True, None

    def _disarm(self) -> None:
        with self._lock:
            observer, self._observer = self._observer, None
        self.armed = False
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(10)

    def _start_observer(self, observer: BaseObserver, mode: str) -> None:
        handler = _Handler(self)
        try:
            observer.schedule(handler, str(self.workspace.root), recursive=False)
            memory_dir = self.workspace.root / MEMORY_DIR
            if memory_dir.is_dir() and not memory_dir.is_symlink():
                _schedule_if_present(observer, handler, memory_dir, recursive=True)
            sessions_dir, transcripts = self.workspace.sessions_dir, self.workspace.transcripts
            if sessions_dir is not None and sessions_dir.is_dir() and not sessions_dir.is_symlink():
                _schedule_if_present(observer, handler, sessions_dir, recursive=True)
            if transcripts is not None and transcripts.is_dir():
                _schedule_if_present(observer, handler, transcripts, recursive=False)
            for extra in self.workspace.extra_roots:
                if extra.is_dir():
                    _schedule_if_present(observer, handler, extra, recursive=True)
                elif extra.parent.is_dir() and extra.parent != self.workspace.root:
                    _schedule_if_present(observer, handler, extra.parent, recursive=False)
            observer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                observer.stop()
            raise
        with self._lock:
            self._observer = observer
        self.mode = mode

    def _event(self, path: Path, is_directory: bool) -> None:
        root = self.workspace.root
        transcripts = self.workspace.transcripts
        if transcripts is not None and path.parent == transcripts and path.name.endswith(".jsonl"):
            self.on_change(None)  # a sync brings the transcript's Markdown copy up to date (mdmem.files.transcripts)
            return
        if is_directory:
            own = (root, root / MEMORY_DIR, self.workspace.sessions_dir, transcripts)
            if path in own or path in self.workspace.extra_roots:
                self._wake.set()  # a watched folder itself changed: the guard re-arms and resyncs
                self.on_change(None)
            elif self.workspace.is_memory_path(path / "x.md"):
                self.on_change(None)  # a folder appeared, vanished or moved: reconcile everything below it
            return
        if is_editor_temp(path.name) or not self.workspace.is_memory_path(path):
            return
        self.on_change(self.workspace.rel(path))


def _identity(path: Path, *, follow: bool) -> Identity:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _is_md_name(path: Path) -> bool:
    return path.name.lower().endswith(".md")


def _schedule_if_present(observer: BaseObserver, handler: _Handler, folder: Path, *, recursive: bool) -> None:
    """Watch ``folder``; one that vanished meanwhile is left to the guard's next check."""
    try:
        observer.schedule(handler, str(folder), recursive=recursive)
    except (FileNotFoundError, NotADirectoryError):
        pass


def _native_failure(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return f"inotify watch limit reached ({exc}): raise fs.inotify.max_user_watches"
    if exc.errno == errno.EMFILE:
        return f"inotify instance limit reached ({exc}): raise fs.inotify.max_user_instances"
    return f"native file watching is unavailable ({exc})"
