"""Replicas without the agent's files: how soon another replica recalls a retain, and what a retain costs.

Starts a PostgreSQL for the run (``pgserver``, temporary), two ``mdmem serve`` replicas whose agent is in
``service.remoteAgents`` (the workspace is on no host here), with the hash provider. ``--entries`` times: a
``POST /retain`` to replica A (timed: the commit of the pending entry), then ``POST /recall`` to replica B as
fast as it answers until the entry's text is in it (timed from the retain's 202). Then the agent's host is
started (``mdmem watch``) and the time until every entry is written into its files is reported.

    python benchmarks/replica_latency.py [--entries 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_helpers import Daemon  # noqa: E402
from tests.fleet import Fleet, recalled  # noqa: E402
from tests.service_bodies import openai_entry, retain_body  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(entries: int) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["MDMEMORY_HOME"] = str(root / "agent-host-home")  # the watch's state folder
        server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
        fleet = Fleet(root / "fleet", {"backend": "postgres", "url": server.get_uri(), "schema": "mdmemory"})
        try:
            a, b = fleet.replica("a"), fleet.replica("b")
            retain_ms, recall_ms = [], []
            for i in range(entries):
                question = f"what is the colour of parcel {i}?"
                body = retain_body(
                    "main", openai_entry(question, f"Parcel {i} is wrapped in vermil{i}x paper.", id=f"hist1_b{i}")
                )
                started = time.perf_counter()
                assert a.call("POST", "/retain", body).status == 202
                acked = time.perf_counter()
                retain_ms.append((acked - started) * 1000)
                while f"vermil{i}x" not in recalled(b, question):
                    if time.perf_counter() - acked > 30:
                        raise RuntimeError(f"entry {i} not recalled by replica B within 30 s")
                recall_ms.append((time.perf_counter() - acked) * 1000)
            started = time.perf_counter()
            daemon = Daemon(fleet.agent_config)
            try:
                log = fleet.entry_log()
                while log.has_work():
                    time.sleep(0.05)
                written_s = time.perf_counter() - started
                log.conn.close()
            finally:
                daemon.stop()
            assert fleet.in_files()[0] == fleet.indexed()
        finally:
            fleet.stop()
            server.cleanup()
    return {
        "entries": entries,
        "retainMs": {"p50": round(statistics.median(retain_ms), 1), "p95": round(pct(retain_ms, 0.95), 1)},
        "recalledByOtherReplicaMs": {
            "p50": round(statistics.median(recall_ms), 1),
            "p95": round(pct(recall_ms, 0.95), 1),
            "max": round(max(recall_ms), 1),
        },
        "writtenIntoFilesSeconds": round(written_s, 2),
        "machine": f"{platform.processor() or platform.machine()}, {platform.node()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = run(args.entries)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
