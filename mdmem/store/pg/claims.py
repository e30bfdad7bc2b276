"""Which workspace an agent's index in the shared database belongs to (``workspaces``, one row per agent).

The first writer of an agent's index that has a workspace records it (its id, host and real path:
mdmem.store.workspaceid). From then on a writer or a search from another workspace is refused with an
error naming both, so two hosts that give the same agent id to different workspaces never replace each
other's rows or read each other's notes. Replicas of the same workspace (a shared volume, at any path)
have its id and are allowed; a replica without the agent's files has no workspace and claims nothing.
``take`` makes another workspace the agent's deliberately (``mdmem index --take-over``).

Checked under the agent's writer lock (so the check and the writes that follow cannot interleave with
another writer's) and on each search's ``refresh`` (one join in the query it makes anyway).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mdmem.store.workspaceid import WorkspaceIdentity, by_path, identify
from mdmem.util.errors import StoreError, WorkspaceError

if TYPE_CHECKING:
    from pathlib import Path

TAKE_OVER = "mdmem index --take-over"
COLUMNS = "w.workspace_id, w.host, w.path, w.claimed_at"  # what ``Claim.from_row`` reads, in this order


@dataclass(frozen=True)
class Claim:
    """The workspace an agent's index belongs to, as recorded."""

    workspace_id: str
    host: str
    path: str
    claimed_at: float

    @classmethod
    def from_row(cls, row: Any) -> Claim | None:
        if row is None or row[0] is None:
            return None
        return cls(str(row[0]), str(row[1]), str(row[2]), float(row[3]))

    def holds(self, ours: WorkspaceIdentity) -> bool:
        """Whether ``ours`` is the workspace claimed (by its id; by host and path while it cannot be read)."""
        if ours.id is not None:
            return ours.id == self.workspace_id
        return (ours.host, ours.path) == (self.host, self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"workspaceId": self.workspace_id, "host": self.host, "path": self.path, "claimedAt": self.claimed_at}


class Guard:
    """One store's side of the claims: the agent's ``workspace`` on this host (None: a replica without the
    agent's files, or a rebuild's store: it checks and claims nothing)."""

    def __init__(self, workspace: Path | None, agent_id: str, schema: str) -> None:
        self.workspace = workspace
        self.agent_id = agent_id
        self.schema = schema
        self._identity: WorkspaceIdentity | None = None

    def identity(self) -> WorkspaceIdentity | None:
        """The workspace as the claims see it, made once (one that could not be read is looked at again)."""
        if self.workspace is None:
            return None
        if self._identity is None or self._identity.id is None:
            self._identity = identify(self.workspace)
        return self._identity

    def check(self, claim: Claim | None) -> None:
        """For a search: ``StoreError(kind="conflict")`` when the index is another workspace's (one whose id
        file is damaged is known by its host and path here: searches answer while it is repaired)."""
        if claim is None or self.workspace is None:
            return
        try:
            ours = self.identity() or by_path(self.workspace)
        except WorkspaceError:
            ours = by_path(self.workspace)
        check(claim, ours, self.agent_id, self.schema)

    def hold(self, conn: Any) -> None:
        """For a writer, under the agent's writer lock: claim the index if nobody has, else check the claim."""
        ours = self.identity()
        if ours is None:
            return
        with conn.transaction(), conn.cursor() as cur:
            claim = read(cur, self.schema, self.agent_id)
            if claim is None and ours.id is not None:
                cur.execute(
                    f"INSERT INTO {self.schema}.workspaces (agent_id, workspace_id, host, path, claimed_at) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (agent_id) DO NOTHING",
                    (self.agent_id, ours.id, ours.host, ours.path, time.time()),
                )
                claim = read(cur, self.schema, self.agent_id)
        check(claim, ours, self.agent_id, self.schema)

    def take(self, conn: Any) -> dict[str, Any] | None:
        """Make this workspace the agent's whatever was claimed; the claim it replaced (None: none, or ours)."""
        ours = self.identity()
        if ours is None or ours.id is None:
            where = "has no workspace on this host" if ours is None else f"has its workspace {ours.path} unreadable"
            raise StoreError(
                f"agent {self.agent_id!r} {where}: it cannot take over the agent's index. Fix: run it on the "
                "host that holds the agent's files, with the workspace mounted",
                kind="conflict",
            )
        with conn.transaction(), conn.cursor() as cur:
            before = read(cur, self.schema, self.agent_id)
            cur.execute(
                f"INSERT INTO {self.schema}.workspaces (agent_id, workspace_id, host, path, claimed_at) VALUES "
                "(%s, %s, %s, %s, %s) ON CONFLICT (agent_id) DO UPDATE SET workspace_id = EXCLUDED.workspace_id, "
                "host = EXCLUDED.host, path = EXCLUDED.path, claimed_at = EXCLUDED.claimed_at",
                (self.agent_id, ours.id, ours.host, ours.path, time.time()),
            )
        return before.to_dict() if before is not None and not before.holds(ours) else None


def read(cur: Any, schema: str, agent_id: str) -> Claim | None:
    cur.execute(f"SELECT {COLUMNS} FROM {schema}.workspaces w WHERE w.agent_id = %s", (agent_id,))
    return Claim.from_row(cur.fetchone())


def check(claim: Claim | None, ours: WorkspaceIdentity, agent_id: str, schema: str) -> None:
    """Raise ``StoreError(kind="conflict")`` when ``claim`` is another workspace's."""
    if claim is not None and not claim.holds(ours):
        raise conflict(claim, ours, agent_id, schema)


def conflict(claim: Claim, ours: WorkspaceIdentity, agent_id: str, schema: str) -> StoreError:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(claim.claimed_at))
    if (claim.host, claim.path) == (ours.host, ours.path) and ours.id is not None:
        # The same folder on a host of the same name, under another id: most likely the id file was removed
        # (``git clean -x``: the folder ignores itself) or replaced; else another machine with the same host
        # name mounts another workspace at the same path (containers with host networking): never adopted.
        file = f"{ours.path}/.mdmemory/workspace-id"
        return StoreError(
            f"agent {agent_id!r} in PostgreSQL schema {schema} was indexed from this same folder {ours.path} on host "
            f"{ours.host} (since {when}) under the workspace id {claim.workspace_id}, but {file} now holds "
            f"{ours.id}: the id file was removed or replaced (a `git clean -x`, a restore without hidden folders?), "
            "or another machine with the same host name has another workspace at this path. Nothing was read or "
            f"written. Fix: if this is the same workspace, put its id back: `echo {claim.workspace_id} > {file}`; "
            f"if it is another one, give the agent another id, or run `{TAKE_OVER}` to make it the agent's for good",
            kind="conflict",
        )
    theirs = f"workspace {claim.path} on host {claim.host} (id {claim.workspace_id}, since {when})"
    mine = f"workspace {ours.path} on host {ours.host} (id {ours.id or 'unknown: the folder cannot be read'})"
    return StoreError(
        f"agent {agent_id!r} in PostgreSQL schema {schema} is the index of {theirs}, not of this {mine}: two "
        "workspaces under one agent id would replace each other's notes, so this one is refused (nothing was "
        "read or written). Fix: give this agent another id (agents.list[].id), or another store.schema; or, "
        f"if this workspace should replace that one for good, run `{TAKE_OVER}` here (that index is rebuilt "
        "from this workspace's files)",
        kind="conflict",
    )
