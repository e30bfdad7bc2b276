"""Recalls answered by worker processes, so that every core serves them (``service.recallWorkers``).

A recall is mostly Python (the search's fusion, the pack's trimming, JSON) and Python runs one thread at a
time per process: one process answers about one recall at a time however many cores the machine has. The
service therefore starts a few worker processes (mdmem.service.recall_worker) and hands each recall to an
idle one, request by request (not connection by connection, so eight clients on two workers wait alike);
the service's own process keeps parsing HTTP, checking tokens, catching each index up with its files, and
doing every write (retain, forget, indexing), as before.

What can go wrong is contained: a worker that dies, hangs past ``CALL_SECONDS`` or answers garbage is
killed and replaced in the background, and the recall it had is answered in the service's process instead
(the caller gets ``None`` and does it itself), so a client never sees a worker's death. When workers cannot
be started at all, every recall is answered in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from mdmem.service.recall_worker import HEADER, read_frame, write_frame

CALL_SECONDS = 60.0  # a recall that takes longer is abandoned to the in-process path and its worker replaced
START_SECONDS = 300.0  # a worker must be ready (imports done, every agent opened and queried once) within this
MAX_RESTARTS = 5  # in a row without a recall answered in between: then the pool gives up (in-process only)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_size() -> int:
    """``service.recallWorkers: "auto"``: one worker per core, up to 4; none on a one-core machine."""
    n = cores()
    return 0 if n < 2 else min(n, 4)


class WorkerLost(Exception):
    """The worker closed its socket, or answered something that is not a reply."""


class NoWorkerInTime(Exception):
    """Every worker stayed busy until the recall's time to start had passed."""


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.lost = False  # set once the pool has given it up (it may still sit in the idle queue)

    async def call(self, agent_id: str, body: bytes, embed_by: float | None = None) -> tuple[dict[str, Any], bytes]:
        """The worker's reply; ``embed_by`` (a ``time.monotonic()`` value) bounds its query embedding."""
        loop = asyncio.get_running_loop()
        request: dict[str, Any] = {"agent": agent_id}
        if embed_by is not None:  # as time left: the worker's clock need not be this one
            request["embedMs"] = round((embed_by - time.monotonic()) * 1000, 1)
        data = json.dumps(request).encode() + b"\n" + body
        await loop.sock_sendall(self.sock, HEADER.pack(len(data)) + data)
        size = HEADER.unpack(await self._read(loop, HEADER.size))[0]
        head, _, payload = (await self._read(loop, size)).partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError:
            raise WorkerLost("a reply without a header") from None
        if not isinstance(header, dict) or not isinstance(header.get("status"), int):
            raise WorkerLost("a reply without a status")
        return header, payload

    async def _read(self, loop: asyncio.AbstractEventLoop, size: int) -> bytes:
        buf = bytearray()
        while len(buf) < size:
            chunk = await loop.sock_recv(self.sock, size - len(buf))
            if not chunk:
                raise WorkerLost("the worker closed its socket")
            buf += chunk
        return bytes(buf)

    def stop(self, wait: float = 5.0) -> None:
        """Close its socket (the worker exits at end of file); kill it if it has not after ``wait`` seconds."""
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def spawn(config: Any, warm: Sequence[str] = ()) -> Worker:
    """Start one worker and wait until it has loaded the configuration and answered one recall for each agent
    of ``warm``. Raises OSError when it cannot."""
    parent, child = socket.socketpair()
    try:
        cmd = [sys.executable, "-m", "mdmem.service.recall_worker", str(child.fileno())]
        proc = subprocess.Popen(cmd, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
    except OSError:
        parent.close()
        raise
    finally:
        child.close()
    worker = Worker(proc, parent)
    try:
        parent.settimeout(START_SECONDS)
        write_frame(parent, pickle.dumps((config, list(warm))))
        head, _, _ = read_frame(parent).partition(b"\n")
        if json.loads(head).get("status") != 200:
            raise OSError("the recall worker did not start")
        parent.setblocking(False)
    except Exception as exc:
        worker.stop(wait=0.5)
        raise OSError(f"the recall worker did not start: {exc}") from None
    return worker


class RecallPool:
    """``size`` workers of ``config``; ``recall`` runs on the service's event loop."""

    def __init__(self, config: Any, size: int) -> None:
        self.config = config
        self.size = size
        self.warm: list[str] = []  # the agents each worker opens and queries once before it is ready
        self._workers: list[Worker] = []  # alive, idle or busy
        self._idle: asyncio.Queue[Worker] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._failures = 0  # restarts in a row that did not lead to an answered recall
        self.restarts = 0

    def start(self) -> None:
        """Start the workers (side by side); those that cannot start are retried once recalls arrive."""
        threads = [threading.Thread(target=self._add, daemon=True) for _ in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    @property
    def alive(self) -> int:
        with self._lock:
            return len(self._workers)

    async def recall(
        self, agent_id: str, body: bytes, start_by: float | None = None, embed_by: float | None = None
    ) -> tuple[dict[str, Any], bytes] | None:
        """The worker's reply header and body; None when no worker answered (the caller answers itself).
        ``start_by`` (a ``time.monotonic()`` value): NoWorkerInTime when no worker is idle by then (a recall
        that waited that long is not worth answering); ``embed_by`` bounds the worker's query embedding."""
        idle = self._queue()
        while True:
            if self.alive == 0:
                return None
            wait = 1.0 if start_by is None else min(1.0, start_by - time.monotonic())
            if wait <= 0:
                raise NoWorkerInTime()
            try:
                worker = await asyncio.wait_for(idle.get(), wait)
            except TimeoutError:
                continue  # all busy; or all gone meanwhile, and then this recall is answered in-process
            if not worker.lost:
                break
        # Shielded: a caller cancelled mid-recall must not leave a reply in the socket for the next one.
        return await asyncio.shield(asyncio.ensure_future(self._call(worker, agent_id, body, embed_by)))

    async def _call(
        self, worker: Worker, agent_id: str, body: bytes, embed_by: float | None = None
    ) -> tuple[dict[str, Any], bytes] | None:
        try:
            got = await asyncio.wait_for(worker.call(agent_id, body, embed_by), CALL_SECONDS)
        except (TimeoutError, WorkerLost, OSError):
            self._lose(worker)
            return None
        self._failures = 0
        self._give_back(worker)
        return got

    def _queue(self) -> asyncio.Queue[Worker]:
        if self._idle is None:
            idle: asyncio.Queue[Worker] = asyncio.Queue()
            with self._lock:  # a worker _add()s after this is given back by it, one before is taken here
                self._loop = asyncio.get_running_loop()
                for w in self._workers:
                    idle.put_nowait(w)
                self._idle = idle
        return self._idle

    def _give_back(self, worker: Worker) -> None:
        """Back to the idle queue; from another thread through the loop."""
        if self._idle is None or self._loop is None or self._closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._idle.put_nowait(worker)
        else:
            self._loop.call_soon_threadsafe(self._idle.put_nowait, worker)

    def _watch(self, worker: Worker) -> None:
        """Notice a worker's death at once, not when the next recall is given to it."""
        worker.proc.wait()
        self._lose(worker)

    def _lose(self, worker: Worker) -> None:
        """Kill ``worker`` and start another in the background (up to ``MAX_RESTARTS`` in a row)."""
        with self._lock:
            if worker.lost or self._closed:
                return
            worker.lost = True
            self._workers.remove(worker)
        self._failures += 1
        self.restarts += 1
        threading.Thread(target=self._replace, args=(worker, self._failures <= MAX_RESTARTS), daemon=True).start()

    def _replace(self, worker: Worker, again: bool) -> None:
        """Start a worker in ``worker``'s place; one that dies before it is ready (it was killed while it
        opened the agents) is started again, within the same ``MAX_RESTARTS`` in a row."""
        worker.stop(wait=0)
        while again and not self._closed:
            time.sleep(min(2.0, 0.1 * self._failures))
            if self._add():
                return
            self._failures += 1
            self.restarts += 1
            again = self._failures <= MAX_RESTARTS

    def _add(self) -> bool:
        """Start one worker and put it in the pool; False when it did not start (the error is logged)."""
        try:
            worker = spawn(self.config, self.warm)
        except OSError as exc:
            print(json.dumps({"type": "memory_error", "memory_op": "recall", "error": str(exc)}), file=sys.stderr)
            return False
        with self._lock:
            if self._closed:
                worker.stop(wait=0.5)
                return True
            self._workers.append(worker)
            serving = self._idle is not None
        threading.Thread(target=self._watch, args=(worker,), name="mdmemory-recall-watch", daemon=True).start()
        if serving:
            self._give_back(worker)
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for w in workers:
            w.stop()
