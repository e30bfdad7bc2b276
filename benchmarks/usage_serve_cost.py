"""What use tracking costs a recall of ``mdmem serve``: recall latency (p50, p95) with ``usage.enabled`` off
and on (the defaults), on one index, one run.

The LoCoMo dev workspace (``benchmarks/locomo.py`` writes it) is indexed once with the shared MiniLM GGUF (or
``--provider none``). Two real ``mdmem serve`` processes, one with tracking off and one on, open that index;
every question goes as a cllama-shaped ``POST /recall`` to each in turn from one client (persistent
connections), the order rotating per question, so load from other processes hits both alike. The whole
request is timed: the query's embedding, the search, the pack, the counting, the JSON. Prints each serve's
p50/p95 and the on/off ratios (the issue's bar: at most 1.05 on p95), and the uses written (rows in the usage
table after both have stopped).

    python benchmarks/usage_serve_cost.py [--provider local|none] [--questions N] [--recall-workers N]
        [--json out.json]
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from pack_latency import percentile  # noqa: E402
from service_load import Server  # noqa: E402

from mdmem.memory import Memory  # noqa: E402
from tests.service_bodies import recall_body  # noqa: E402

MODES: dict[str, list[tuple[str, Any]]] = {"off": [("memorySearch.usage.enabled", False)], "on": []}


def write_config(root: Path, workspace: Path, model: Path, provider: str, mode: str, workers: int | None) -> Path:
    top: dict[str, Any] = {"agents.list": [{"id": "main", "workspace": str(workspace)}]}
    if workers is not None:
        top["service.recallWorkers"] = workers
    return locomo.write_cost_config(root, workspace, model, provider, mode, MODES[mode], top)


def recall_ms(server: Server, conn: http.client.HTTPConnection, text: str) -> float:
    started = time.perf_counter()
    status, payload = server.request("POST", "/recall", recall_body("main", text), conn)
    ms = 1000 * (time.perf_counter() - started)
    if status != 200:
        raise SystemExit(f"recall answered {status}: {payload[:300]!r}")
    return ms


def main(argv: list[str] | None = None) -> int:
    ap = locomo.cost_arguments(__doc__.split("\n")[0])
    ap.add_argument("--recall-workers", type=int, default=None, help="service.recallWorkers (default: serve's own)")
    args = ap.parse_args(argv)
    conversations = json.loads(args.data.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="mdm-usage-serve-cost-") as tmp:
        root = Path(tmp)
        questions = locomo.dev_questions(conversations, root / "ws", args.questions)
        configs = {m: write_config(root, root / "ws", args.model, args.provider, m, args.recall_workers) for m in MODES}
        env = {**os.environ, "MDMEMORY_HOME": str(root / "home"), "HF_HUB_OFFLINE": "1"}
        with Memory.open(config_path=configs["off"]) as builder:  # indexed once, before either serve starts
            builder.sync()
        servers = {m: Server(configs[m], env, root / f"serve-{m}.log") for m in MODES}
        times: dict[str, list[float]] = {m: [] for m in MODES}
        try:
            conns = {m: http.client.HTTPConnection("127.0.0.1", s.port, timeout=60) for m, s in servers.items()}
            for m, s in servers.items():  # warm: the model loaded, the index opened, the workers started
                for q in questions[:5]:
                    recall_ms(s, conns[m], q.text)
            names = list(MODES)
            for i, q in enumerate(questions):
                for m in names[i % 2 :] + names[: i % 2]:
                    times[m].append(recall_ms(servers[m], conns[m], q.text))
            for c in conns.values():
                c.close()
        finally:
            for s in servers.values():
                s.stop()  # SIGTERM: the serve with tracking on writes its last counts
        with Memory.open(config_path=configs["off"]) as check:
            rows = check.store.usage_rows()
    out: dict[str, Any] = {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "provider": args.provider,
        "questions": len(questions),
        "usageRows": len(rows),
        "usesCounted": sum(r.uses for r in rows),
    }
    for m in MODES:
        out[m] = {"p50ms": round(percentile(times[m], 0.5), 2), "p95ms": round(percentile(times[m], 0.95), 2)}
        print(m, json.dumps(out[m]), flush=True)
    out["p50Ratio"] = round(out["on"]["p50ms"] / out["off"]["p50ms"], 3)
    out["p95Ratio"] = round(out["on"]["p95ms"] / out["off"]["p95ms"], 3)
    print("on/off p50 ratio", out["p50Ratio"], "p95 ratio", out["p95Ratio"])
    print("usage rows written", out["usageRows"], "uses counted", out["usesCounted"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
