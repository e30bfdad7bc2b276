"""Recall latency against the proxy's budget (cllama: 300 ms; ``service.recallBudgetMs``: 250 ms), with MiniLM.

Two things a proxy in front of ``mdmem serve`` meets, measured from a client on 127.0.0.1 (a new
connection per request, as a proxy's first turn opens one), with the local MiniLM model:

1. **first recalls**: ``mdmem serve`` started over ``--agents`` fresh workspaces (nothing indexed yet);
   as soon as ``/healthz`` says ready, the first recall of every agent at once. Then the service is stopped
   and started again over the indexes on disk, and the same. Repeated ``--starts`` times.
2. **retain -> recall**: ``--rounds`` times, a new fact is retained (a cllama-shaped entry: "the code word for
   project X is Y") and, as soon as the retain is answered, a question about it is recalled; the report says
   whether the fact was in the answer, and how the search answered (``hybrid``: with the model's vectors;
   ``keyword``: the query could not be embedded in time).

Reports p50/p95/max of each (client-side milliseconds), the time to ready, the retain latency, and the
machine (CPU, cores, load average). Target: p95 <= 250 ms in both.

    python benchmarks/recall_budget.py [--agents 3] [--starts 3] [--rounds 30] [--notes 60] [--json out.json]
        [--model PATH] [--serve-args '--recall-workers 0'] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.service_bodies import openai_entry, recall_body, retain_body  # noqa: E402
from tests.service_server import free_port  # noqa: E402

MINILM = (
    Path(os.environ.get("MDMEMORY_TEST_SHARED") or REPO.parent / "shared") / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
)
TOKEN = "bench-budget-token"
TARGET_MS = 250.0
PROJECTS = "Bluebird Kestrel Marigold Tundra Juniper Obsidian Pelican Saffron Quartz Lantern Heron Osprey".split()
WORDS = "amber birch cobalt delta ember fjord garnet harbor indigo jasper kelp lumen maple nimbus onyx prism".split()
MEMORY_MD = """# Memory

## Infrastructure

- Nightly backups go to s3://zebra-nightly at 02:00 UTC.
- The staging cluster is called heron; production is called osprey.

## People

- Dana owns the billing service; ask her about invoices.
- Ravi maintains the deploy pipeline (Ansible, run from the ops box).
"""
FIRST_QUESTIONS = [
    "Where do the nightly backups go?",
    "Who owns the billing service?",
    "What is the staging cluster called?",
    "Who maintains the deploy pipeline?",
]


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "python": platform.python_version(),
    }


def build(root: Path, agents: list[str], notes: int, model: Path) -> Path:
    rng = random.Random(11)
    listed = []
    for name in agents:
        ws = root / "ws" / name
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / "MEMORY.md").write_text(MEMORY_MD)
        for i in range(notes):
            a, b = rng.sample(WORDS, 2)
            (ws / "memory" / f"2026-{i % 12 + 1:02d}-{i % 28 + 1:02d}-{i}.md").write_text(
                f"# Day {i}\n\n## {a.title()} review\n\nThe {a} team moved the {b} job to runner {i} after "
                f"the incident on day {i}; Dana signed off invoice {1000 + i}.\n"
            )
        listed.append({"id": name, "workspace": str(ws)})
    local = {"modelPath": str(model)}
    cfg = {
        "agents": {
            "defaults": {"memorySearch": {"provider": "local", "fallback": "none", "local": local}},
            "list": listed,
        },
        "service": {},
    }
    path = root / "config.json"
    path.write_text(json.dumps(cfg))
    return path


class Serve:
    def __init__(self, config: Path, home: Path, log: Path, extra: list[str]) -> None:
        self.config, self.home, self.log, self.extra = config, home, log, extra
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start and wait until ready; the seconds it took."""
        self.port = free_port()
        env = {**os.environ, "MDMEMORY_HOME": str(self.home), "MEMORY_API_TOKEN": TOKEN, "HF_HUB_OFFLINE": "1"}
        env["PYTHONPATH"] = str(REPO)
        started = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mdmem", "serve", "--config", str(self.config), "--port", str(self.port)]
                + self.extra,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        while time.monotonic() - started < 600:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.log.read_text()[-2000:]}")
            try:
                if self.call("GET", "/healthz", None)[0] == 200:
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("serve did not become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def call(self, method: str, path: str, body: Any) -> tuple[int, Any, float]:
        """(status, parsed body, client-side ms) over a new connection."""
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            conn.request(method, path, body=data, headers=headers)
            reply = conn.getresponse()
            raw = reply.read()
        finally:
            conn.close()
        ms = (time.perf_counter() - started) * 1000
        return reply.status, json.loads(raw) if raw else None, ms

    def telemetry(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith('{"ts"'):
                out.append(json.loads(line))
        return out


def first_recalls(svc: Serve, agents: list[str]) -> list[dict[str, Any]]:
    """The first recall of every agent, all at once."""
    out: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(i: int, agent: str) -> None:
        status, body, ms = svc.call("POST", "/recall", recall_body(agent, FIRST_QUESTIONS[i % len(FIRST_QUESTIONS)]))
        with lock:
            out.append({"agent": agent, "status": status, "ms": ms, "blocks": len((body or {}).get("memories", []))})

    threads = [threading.Thread(target=one, args=(i, a)) for i, a in enumerate(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def retain_recall(svc: Serve, agent: str, rounds: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    out = []
    for i in range(rounds):
        project = f"{PROJECTS[i % len(PROJECTS)]}{i}"
        code = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{rng.randint(1000, 9999)}"
        entry = openai_entry(f"Please remember: the code word for project {project} is {code}.", "Noted, thanks.")
        rstatus, _, retain_ms = svc.call("POST", "/retain", retain_body(agent, entry))
        status, body, ms = svc.call(
            "POST", "/recall", recall_body(agent, f"What is the code word for project {project}?")
        )
        mode = next((e.get("memory_result") for e in reversed(svc.telemetry()) if e.get("memory_op") == "recall"), None)
        hit = status == 200 and any(code in str(m.get("text")) for m in body.get("memories", []))
        out.append({"retain": rstatus, "retain_ms": retain_ms, "status": status, "ms": ms, "hit": hit, "mode": mode})
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def summary(values: list[float]) -> str:
    if not values:
        return "n=0"
    return f"p50 {pct(values, 50):.0f} / p95 {pct(values, 95):.0f} / max {max(values):.0f} ms (n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--starts", type=int, default=3, help="fresh starts (each followed by a restart)")
    ap.add_argument("--rounds", type=int, default=30, help="retain -> recall rounds")
    ap.add_argument("--notes", type=int, default=60, help="notes files per agent's workspace")
    ap.add_argument("--model", type=Path, default=MINILM)
    ap.add_argument("--serve-args", default="", help="extra `mdmem serve` arguments")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workdir", type=Path, help="work here (kept) instead of a temporary folder")
    args = ap.parse_args()
    if not args.model.is_file():
        print(f"no model at {args.model}: pass --model PATH (a GGUF embedding model, e.g. all-MiniLM-L6-v2)")
        return 2
    agents = [f"agent{i + 1}" for i in range(args.agents)]
    root = args.workdir or Path(tempfile.mkdtemp(prefix="mdm-budget-"))
    before = machine()
    fresh: list[dict[str, Any]] = []
    restart: list[dict[str, Any]] = []
    ready: dict[str, list[float]] = {"fresh": [], "restart": []}
    loop: list[dict[str, Any]] = []
    try:
        for s in range(args.starts):
            run = root / f"start{s}"
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir(parents=True)
            svc = Serve(
                build(run, agents, args.notes, args.model), run / "home", run / "serve.log", args.serve_args.split()
            )
            try:
                ready["fresh"].append(svc.start())
                fresh += first_recalls(svc, agents)
            finally:
                svc.stop()
            try:
                ready["restart"].append(svc.start())
                restart += first_recalls(svc, agents)
                if s == args.starts - 1 and args.rounds:
                    loop = retain_recall(svc, agents[0], args.rounds)
            finally:
                svc.stop()
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    after = machine()
    firsts = [r["ms"] for r in fresh]
    again = [r["ms"] for r in restart]
    recalls = [r["ms"] for r in loop]
    report = {
        "machine": {**before, "load_after": after["load"]},
        "agents": args.agents,
        "notes_per_agent": args.notes,
        "ready_seconds": {k: [round(x, 1) for x in v] for k, v in ready.items()},
        "first_recall_fresh": fresh,
        "first_recall_restart": restart,
        "retain_recall": loop,
    }
    print(
        f"machine: {before['cpu']}, {before['cores']} cores, load {before['load']} -> {after['load']}, {before['date']}"
    )
    ready_s = {k: ", ".join(f"{x:.1f}" for x in v) for k, v in ready.items()}
    print(f"ready after (s): fresh starts {ready_s['fresh']}; restarts {ready_s['restart']}")
    print(f"first recall, fresh start ({args.agents} agents at once, {args.starts} starts): {summary(firsts)}")
    print(f"first recall, restart over the indexes on disk: {summary(again)}")
    bad = [r for r in fresh + restart if r["status"] != 200 or not r["blocks"]]
    if bad:
        print(f"  first recalls without an answer: {bad}")
    if loop:
        hits = sum(r["hit"] for r in loop)
        modes = {m: sum(r["mode"] == m for r in loop) for m in {r["mode"] for r in loop}}
        print(
            f"retain -> recall ({len(loop)} rounds): recall {summary(recalls)}; fact in the answer {hits}/{len(loop)}"
        )
        print(f"  search modes {modes}; retain {summary([r['retain_ms'] for r in loop])}")
    worst = max(pct(firsts, 95), pct(again, 95), pct(recalls, 95) if recalls else 0.0)
    print(f"target p95 <= {TARGET_MS:.0f} ms: {'met' if worst <= TARGET_MS else 'MISSED'} (worst p95 {worst:.0f} ms)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
