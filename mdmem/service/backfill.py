"""``mdmem backfill``: replay the proxy's ``history.jsonl`` ledgers into memory, locally or over HTTP.

A ledger is ``<baseDir>/<agent-id>/history.jsonl`` (cllama ``internal/sessionhistory/recorder.go``), so the
agent id defaults to the ledger's folder name. Rotated siblings (``history.jsonl.1``, ``.2``...) are read
first, oldest (highest number) first, then the live file. A line without ``id`` gets the proxy's id for
it, ``IDFromJSON`` of its own bytes. Retain is idempotent and honours tombstones, so backfill can run any
number of times. Line numbers in ``invalid`` count across the files in the order they were read.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mdmem.files.entry_id import id_from_json
from mdmem.service.contract import check_agent_id, check_entry, check_json, check_pod
from mdmem.util.errors import InvalidArgumentError, MdMemoryError

Retain = Callable[[str, dict[str, Any]], str]  # (agent_id, entry) -> "retained" | "duplicate" | "forgotten"


@dataclass
class Summary:
    read: int = 0
    retained: int = 0
    duplicates: int = 0
    tombstoned: int = 0
    skipped: int = 0  # at or before --after
    invalid: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ledger_files(paths: list[Path]) -> list[Path]:
    """Each ledger preceded by its rotated files, oldest first."""
    out: list[Path] = []
    for path in paths:
        rotated = []
        for sib in path.parent.glob(path.name + ".*"):
            m = re.fullmatch(re.escape(path.name) + r"\.(\d+)", sib.name)
            if m:
                rotated.append((int(m.group(1)), sib))
        out += [p for _, p in sorted(rotated, reverse=True)]
        out.append(path)
    return list(dict.fromkeys(out))


def count_lines(files: list[Path]) -> int:
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            total += sum(1 for _ in fh)
    return total


def _lines(files: list[Path]) -> Iterator[tuple[Path, int, bytes]]:
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            for raw in fh:
                n += 1
                yield f, n, raw


def parse_time(text: str, name: str = "--after") -> datetime:
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(f"{name}: {text!r} is not an RFC 3339 time such as 2026-11-23T00:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def backfill(
    paths: list[Path],
    retain: Retain,
    *,
    agent: str | None = None,
    after: datetime | None = None,
    limit: int | None = None,
    progress: Callable[[], None] | None = None,
) -> Summary:
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InvalidArgumentError(f"ledger not found: {', '.join(missing)}. Fix: give the path of a history.jsonl")
    if agent is not None:
        check_agent_id(agent, "--agent")
    summary = Summary()
    for path, lineno, raw in _lines(ledger_files(paths)):
        if progress is not None:
            progress()
        if not raw.strip():
            continue
        if limit is not None and summary.read >= limit:
            break
        summary.read += 1
        try:
            entry = json.loads(raw)
            if not isinstance(entry, dict):
                raise InvalidArgumentError("entry: not an object")
            problem = check_json({"entry": entry})  # nesting, lone surrogates, numbers out of range
            if problem is not None:
                raise InvalidArgumentError(problem)
            check_entry({"entry": entry})
            if not (isinstance(entry.get("id"), str) and entry["id"].strip()):
                entry["id"] = id_from_json(raw)
            if after is not None and parse_time(entry["ts"], "entry.ts") <= after:
                summary.skipped += 1
                continue
            who = agent or check_agent_id(path.resolve().parent.name, f"agent of {path} (use --agent)")
            status = retain(who, entry)
        except (ValueError, RecursionError, InvalidArgumentError):
            summary.invalid.append(lineno)
            continue
        if status == "retained":
            summary.retained += 1
        elif status == "duplicate":
            summary.duplicates += 1
        else:
            summary.tombstoned += 1
    return summary


def http_retain(url: str, token: str | None, timeout: float = 30.0, pod: str | None = None) -> Retain:
    """A ``Retain`` that POSTs to a running service's ``/retain`` (as from ``pod``, when given)."""
    endpoint = url.rstrip("/") + "/retain"
    check_pod(pod, "--pod")
    scope = {"pod": pod} if pod else {}

    def retain(agent_id: str, entry: dict[str, Any]) -> str:
        body = {"agent_id": agent_id, **scope, "metadata": {"path": "retain"}, "entry": entry}
        data = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(endpoint, data, {"Content-Type": "application/json"}, method="POST")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return str(json.loads(resp.read())["status"])
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            if exc.code == 400:
                raise InvalidArgumentError(detail) from None
            raise MdMemoryError(f"{endpoint} answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise MdMemoryError(f"cannot reach {endpoint}: {exc}. Fix: check --url and that the service runs") from None

    return retain
