"""Where the pod an agent serves is kept once a request claimed it (mdmem.service.pods), and how.

- An agent indexed in SQLite: ``<index>.pod.json`` beside its index file (by default
  ``{home}/state/memory/<id>.sqlite.pod.json``): ``{"pod": "<name>", "claimed_at": "<RFC 3339 time>"}``,
  made whole or not at all (written to a temporary file, ``fsync``, then hard-linked into place: a second
  claimer finds it there and reads it) and never replaced.
- An agent in the shared PostgreSQL store: its row in the ``pods`` table, which every replica reads; a
  replica that holds the agent's files keeps a copy in ``<index>.pod.json`` beside its local state. When the
  database cannot be reached it goes by that copy, or makes it (the files are where its retains go then, as
  they do without the database), and the database takes the copy's pod when it is reached again; such a
  claim is ``provisional``: looked up again on the next request. So is a claim that could not be written
  (the folder is not one, read-only or full): ``mdmem.service.pods`` keeps it in memory, so that the
  process holds to it, and writes it as soon as it can.

A file that does not say which pod is refused (503 naming it), never replaced: deleting it lets the next pod
claim the agent; a binding (``agents.list[].pod``) wins over any claim.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mdmem.config.load import AgentConfig
from mdmem.service.contract import check_pod
from mdmem.store.open import entry_log, local_disk
from mdmem.util.errors import MdMemoryError, StoreError

SUFFIX = ".pod.json"
_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Owner:
    """The pod an agent serves, and why: ``agents.list`` (a binding) or ``first request`` (a claim)."""

    pod: str
    by: Literal["agents.list", "first request"]
    since: float | None = None  # when a claim was made (UNIX time)
    provisional: bool = False  # made or read while the shared store could not be reached

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"pod": self.pod, "by": self.by}
        if self.since is not None:
            out["since"] = time.strftime(_TIME, time.gmtime(self.since))
        return out


def claim_file(agent: AgentConfig) -> Path:
    """``<index>.pod.json``: beside the agent's SQLite index, or its local state files (PostgreSQL)."""
    return agent.store_path.with_name(agent.store_path.name + SUFFIX)


def claim(agent: AgentConfig, pod: str) -> Owner:
    """The pod ``agent`` serves: ``pod`` when none had claimed it yet (durable before this returns)."""
    path = claim_file(agent)
    if local_disk(agent):
        return _make(path, pod)
    copy = _parse(path) if agent.files_here else None
    try:
        with entry_log(agent) as log:
            assert log is not None
            held, since = log.claim_pod(copy.pod if copy is not None else pod)
    except StoreError:
        if not agent.files_here:
            raise
        made = _make(path, pod)
        return Owner(made.pod, made.by, made.since, provisional=True)
    owner = Owner(held, "first request", since)
    if agent.files_here and (copy is None or copy.pod != held):
        with contextlib.suppress(OSError):
            _write(path, owner, replace=True)
    return owner


def read_claim(agent: AgentConfig) -> Owner | None:
    """The pod that claimed ``agent``, if one has (nothing is made)."""
    path = claim_file(agent)
    if local_disk(agent):
        return _parse(path)
    try:
        with entry_log(agent) as log:
            assert log is not None
            found = log.pod_claim()
    except StoreError:
        if not agent.files_here:
            raise
        copy = _parse(path)
        return Owner(copy.pod, copy.by, copy.since, provisional=True) if copy is not None else None
    return Owner(found[0], "first request", found[1]) if found is not None else None


def _make(path: Path, pod: str) -> Owner:
    """The claim in ``path``, made for ``pod`` when there is none."""
    found = _parse(path)
    if found is not None:
        return found
    owner = Owner(pod, "first request", float(int(time.time())))
    try:
        _write(path, owner, replace=False)
    except FileExistsError:  # another process claimed it a moment ago (or a file is where the folder goes)
        found = _parse(path)
        if found is not None:
            return found
        return Owner(pod, owner.by, owner.since, provisional=True)
    except OSError:  # the folder refuses it (not a folder, read-only, full): the caller keeps it meanwhile
        return Owner(pod, owner.by, owner.since, provisional=True)
    return owner


def _write(path: Path, owner: Owner, *, replace: bool) -> None:
    """Write ``owner`` to ``path`` whole: in place of what is there with ``replace``, else only when nothing
    is (FileExistsError)."""
    since = owner.since if owner.since is not None else time.time()
    body = json.dumps({"pod": owner.pod, "claimed_at": time.strftime(_TIME, time.gmtime(since))}) + "\n"
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)  # a file in its place: FileExistsError, which here means "no folder"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # made whole, or not at all
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _parse(path: Path) -> Owner | None:
    """The claim in ``path``; None when there is none; a file that does not say which pod: StoreError."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # nothing there (another error: who knows, refused)
        return None
    try:
        found = json.loads(data)
        pod = check_pod(found["pod"])
        assert pod is not None
        since = float(calendar.timegm(time.strptime(found["claimed_at"], _TIME)))
    except (ValueError, KeyError, TypeError, AssertionError, MdMemoryError):
        raise StoreError(
            f"{path} does not say which pod the agent serves (expected "
            '{"pod": "<name>", "claimed_at": "<RFC 3339 time>"}). Fix: correct it, or delete it (the next pod '
            "to use the agent claims it), or bind the agent with agents.list[].pod",
            kind="error",
        ) from None
    return Owner(pod, "first request", since)
