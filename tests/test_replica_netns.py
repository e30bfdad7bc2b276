"""A replica on another "host": a ``mdmem serve`` in a network namespace of its own, joined to this one by a
veth pair, reaching PostgreSQL over TCP on the veth address (it cannot reach this host's loopback). With the
agent's host here (its workspace and ``mdmem watch``) and a second replica here, a retain on the far replica
is recalled here and written into the agent's files once; a forget here is honoured there at once.

Needs root and ``ip netns``; skipped otherwise."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_helpers import Daemon
from tests.fleet import TOKEN, Fleet, eventually, recalled
from tests.pg_tcp import TcpPostgres
from tests.service_bodies import openai_entry, retain_body
from tests.service_server import Service, write_config


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_works() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = "mdm-probe-" + secrets.token_hex(3)
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError):
        return False
    _ip("netns", "del", name)
    return True


pytestmark = pytest.mark.skipif(not _netns_works(), reason="needs root and `ip netns`")


@pytest.fixture
def far_host() -> Iterator[tuple[str, str, str]]:
    """(namespace, this host's veth address, the namespace's veth address)."""
    tag = secrets.token_hex(3)
    ns, here, there = f"mdm-{tag}", f"mdmh{tag}", f"mdmr{tag}"
    octet = int(tag[:2], 16) % 250 + 1
    near, far = f"10.231.{octet}.1", f"10.231.{octet}.2"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", ns)
        _ip("addr", "add", f"{near}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", ns, "addr", "add", f"{far}/30", "dev", there)
        _ip("-n", ns, "link", "set", there, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns, near, far
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=30)  # and its peer
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def test_a_replica_on_another_network_host_retains_and_forgets_through_postgresql_over_tcp(
    tmp_path: Path, far_host: tuple[str, str, str]
) -> None:
    ns, near, far = far_host
    pg = TcpPostgres()
    pg.allow(f"{near}/30")  # this host and the far one
    pg.start(near)  # listening on the veth address only
    fleet = Fleet(tmp_path / "fleet", {"backend": "postgres", "url": pg.url, "schema": "mdmemory"})
    daemon = None
    try:
        home = tmp_path / "far-host"
        home.mkdir()
        cfg = write_config(
            home / "config.json",
            {"main": home / "volume-not-here"},
            memory_search={"store": fleet.store},
            remoteAgents=["*"],
        )
        remote = Service(cfg, home / "home", TOKEN, home / "serve.log", host=far, prefix=["ip", "netns", "exec", ns])
        remote.start()
        fleet.replicas.append(remote)
        here = fleet.replica("here")
        probe = subprocess.run(  # the far host has a network of its own: this host's loopback is not in it
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-c",
                f"import socket; socket.create_connection(('127.0.0.1', {here.port}), 2)",
            ],
            capture_output=True,
            timeout=30,
        )
        assert probe.returncode != 0

        question = "which harbour does the narwhal ferry leave from?"
        entry = openai_entry(question, "The narwhal ferry leaves from harbour 9.", id="hist1_n1")
        assert remote.call("POST", "/retain", retain_body("main", entry)).body["status"] == "retained"
        assert eventually(lambda: "harbour 9" in recalled(here, question))
        assert here.call("POST", "/retain", retain_body("main", entry)).body["status"] == "duplicate"
        daemon = Daemon(fleet.agent_config)
        assert eventually(lambda: fleet.blocks_in_files("hist1_n1") == 1)
        assert here.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_n1"]}).status == 204
        assert "harbour 9" not in recalled(remote, question)
        assert remote.call("POST", "/retain", retain_body("main", entry)).body["status"] == "forgotten"
        assert eventually(lambda: fleet.blocks_in_files("hist1_n1") == 0)
    finally:
        if daemon is not None:
            daemon.stop()
        fleet.stop()
        pg.remove()
