"""A real ``mdmem serve`` process on 127.0.0.1 for tests, and a tiny urllib client."""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int
    body: Any
    raw: bytes


@dataclass
class Service:
    config: Path
    home: Path
    token: str | None
    log: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    prefix: list[str] = field(default_factory=list)  # e.g. ``ip netns exec NS``: run it on another "host"
    fd_limit: int | None = None  # RLIMIT_NOFILE (soft and hard) of the service process: ``ulimit -n``
    args: list[str] = field(default_factory=list)  # more ``serve`` arguments (``--agent main``)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start ``mdmem serve``; unless ``wait`` is False, wait until ``/healthz`` says it is ready."""
        self.port = free_port() if not self.prefix else 18080  # another network namespace: all ports free
        env = {**os.environ, "MDMEMORY_HOME": str(self.home), **self.env}
        env.pop("MEMORY_API_TOKEN", None)
        if self.token:
            env["MEMORY_API_TOKEN"] = self.token
        out = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "mdmem", "serve", "--config", str(self.config)]
            + ["--host", self.host, "--port", str(self.port), *self.args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=None if self.fd_limit is None else functools.partial(_limit_fds, self.fd_limit),
        )
        out.close()
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.stop()  # not left running behind a failed test
                raise

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                health = self.call("GET", "/healthz")
                # ready: every agent opened (one that could not be is reported as degraded, with 503)
                if health.status == 200 or (isinstance(health.body, dict) and health.body.get("ready") is True):
                    generated = self.home / "state" / "service-token"
                    if self.token is None and generated.is_file():
                        self.token = generated.read_text().strip()  # the one it made (service.auth "token")
                    return
            except OSError:
                pass
            time.sleep(0.05)  # not listening yet, or 503 while it opens its agents
        raise RuntimeError("serve did not come up")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code, self.proc = self.proc.returncode, None
        return code

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "default",
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        tok = self.token if token == "default" else token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                content = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            content, status = exc.read(), exc.code
        try:
            parsed = json.loads(content) if content else None
        except ValueError:
            parsed = None
        return Reply(status, parsed, content)


def _limit_fds(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def open_fds(pid: int) -> int:
    """How many file descriptors process ``pid`` has open now."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def write_config(
    path: Path,
    workspaces: dict[str, Path],
    provider: str = "hash",
    memory_search: dict[str, Any] | None = None,
    **service: Any,
) -> Path:
    agents = [{"id": k, "workspace": str(v)} for k, v in workspaces.items()]
    ms = {"provider": provider, **(memory_search or {})}
    cfg = {"agents": {"defaults": {"memorySearch": ms}, "list": agents}, "service": service}
    path.write_text(json.dumps(cfg))
    return path
