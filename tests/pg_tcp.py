"""A PostgreSQL of a test's own, listening on a TCP address, that the test can stop and start again: the
``pgserver`` wheel's server and binaries (with pgvector), in a data folder under the test's tmp_path."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path

from tests.pg_server import START_ATTEMPTS


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class TcpPostgres:
    """``start(host)`` listens on ``host`` (an address that exists now) and a free port; ``stop`` shuts it down
    (``mode`` ``fast`` or ``immediate``: a crash); ``url`` is the same across restarts on one host.

    The data folder is not under pytest's tmp_path: a pytest session starting meanwhile makes
    ``/tmp/pytest-of-<user>`` private again, and the server's own user (``pgserver`` under root) could then
    no longer reach its folder to stop it."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
            from pgserver._commands import pg_ctl

        self._pg_ctl = pg_ctl
        root = self.root = Path(tempfile.mkdtemp(prefix="mdmemory-pg-"))
        for attempt in range(1, START_ATTEMPTS + 1):  # as tests.pg_server: initdb now and then aborts
            self.data = root / f"pgdata-{attempt}"
            try:
                server = pgserver.get_server(self.data, cleanup_mode=None)  # initdb, and a start on a socket
                break
            except Exception:
                if attempt == START_ATTEMPTS:
                    raise
        self.user = server.system_user  # "pgserver" when the tests run as root
        self._ctl(["-w", "-m", "fast", "stop"])
        self.host = ""
        self.port = 0

    def _ctl(self, args: list[str]) -> None:
        self._pg_ctl(args, pgdata=self.data, user=self.user, timeout=60)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def start(self, host: str = "127.0.0.1") -> None:
        if host != self.host:
            self.host, self.port = host, free_port(host)
        options = f"-h {self.host} -p {self.port} -k {self.data}"
        self._ctl(["-w", "-o", options, "-l", str(self.data / "log"), "start"])

    def allow(self, network: str) -> None:
        """Let clients from ``network`` (CIDR) in, without a password (takes effect at the next start)."""
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {network} trust\n")

    def stop(self, mode: str = "fast") -> None:
        try:
            self._ctl(["-w", "-m", mode, "stop"])
        except subprocess.CalledProcessError:
            pass  # not running

    def remove(self) -> None:
        self.stop("immediate")
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():  # pg_ctl could not stop it
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
