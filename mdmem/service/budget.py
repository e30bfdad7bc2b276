"""How many client connections and open agent indexes one service process can afford.

Every connection and every open index takes file descriptors, and the process has ``RLIMIT_NOFILE`` of them
(``ulimit -n``; often 1,024). Past the limit nothing can be opened: not an index, not a session file, not an
accepted connection. So the service splits what the limit leaves after its own needs
(``FDS_RESERVED``, plus ``FDS_PER_SOCKET`` for each configured agent's command-line socket and two per
recall worker): up to half for open agents (``service.maxOpenAgents``; ``fds_per_agent`` each: the agent's
index connection and its read connections, three files each, plus locks and writes in flight, at most
``DEFAULT_MAX_OPEN_AGENTS`` by default), the rest for connections (``service.maxConnections``). Agents past
the cap are closed when idle and reopened on demand (mdmem.service.agents), connections past it are
answered 503 (mdmem.service.protocol). The soft limit is first raised to the hard one (as Go programs
do), up to ``RAISE_TO``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mdmem.util.errors import ConfigError

FDS_RESERVED = 64  # stdio, the listening socket, the event loop, model and log files, temporary files
FDS_PER_SOCKET = 4  # a configured agent's command-line socket, its index and a connection or two
FDS_PER_WORKER = 2  # the socket to a recall worker, and its pipe while it starts
DEFAULT_MAX_OPEN_AGENTS = 64  # each open index may also hold its vectors in memory (up to 64 MiB)
MIN_CONNECTIONS = 16
RAISE_TO = 65536


@dataclass(frozen=True)
class Budget:
    fd_limit: int
    max_open_agents: int
    max_connections: int


def fds_per_agent(readers: int) -> int:
    """An open agent: its index (database, WAL, shared memory) and ``readers`` read connections, three files
    each, plus a lock file and a session file open while it writes."""
    return 3 * (1 + readers) + 2


def plan(
    fd_limit: int,
    *,
    readers: int,
    sockets: int = 0,
    workers: int = 0,
    max_open_agents: int | None = None,
    max_connections: int | None = None,
) -> Budget:
    """The caps for ``fd_limit`` descriptors; ConfigError when the configured ones do not fit in it."""
    spare = fd_limit - FDS_RESERVED - sockets * FDS_PER_SOCKET - workers * FDS_PER_WORKER
    per = fds_per_agent(readers)
    agents = max_open_agents
    if agents is None:
        agents = max(1, min(DEFAULT_MAX_OPEN_AGENTS, spare // 2 // per))
    left = spare - agents * per
    if max_connections is None and left >= MIN_CONNECTIONS:
        return Budget(fd_limit, agents, left)
    if max_connections is not None and max_connections <= left:
        return Budget(fd_limit, agents, max_connections)
    wanted = f"the {max_connections} of service.maxConnections" if max_connections else f"{MIN_CONNECTIONS}"
    raise ConfigError(
        f"the file-descriptor limit (ulimit -n) is {fd_limit}: with {agents} open agents (service.maxOpenAgents, "
        f"{per} descriptors each) it leaves room for {max(left, 0)} client connections, fewer than {wanted}. "
        "Fix: raise the limit (ulimit -n 4096, LimitNOFILE= in a systemd unit, --ulimit nofile= for Docker), or "
        "lower service.maxOpenAgents"
    )


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (at most ``RAISE_TO``); the soft limit now in force."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = RAISE_TO if hard == resource.RLIM_INFINITY else min(hard, RAISE_TO)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return RAISE_TO if soft == resource.RLIM_INFINITY else int(soft)


def open_fds() -> int | None:
    """How many file descriptors this process has open (None where the system does not say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return None
