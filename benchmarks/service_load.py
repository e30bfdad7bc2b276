"""Load on a real ``mdmem serve`` process: recall latency at 8 concurrent clients, retain throughput.

Builds a workspace of short Markdown sections (~10k chunks), indexes it twice (local MiniLM, and keyword
only), then for each index starts ``mdmem serve`` on 127.0.0.1 and measures, from 8 client threads with
persistent connections, the latency of ``POST /recall`` (the whole request: query embedding, hybrid search,
ContextPack, JSON). Then 8 clients ``POST /retain`` proxy-shaped entries for ``--retain-seconds``; the
report gives entries/s, errors, and entries acknowledged (202) but missing from ``sessions/*.md`` (lost).

    python benchmarks/service_load.py [--chunks 10000] [--queries 400] [--retain-seconds 10] [--json out.json]
        [--workdir DIR] [--only minilm|keyword] [--serve-args '--recall-workers 0']
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mdmem.files import sessionblocks as blocks  # noqa: E402
from tests.service_bodies import openai_entry, retain_body  # noqa: E402
from tests.service_server import free_port  # noqa: E402

MINILM = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
CLIENTS = 8
SECTIONS_PER_FILE = 50
TOKEN = "bench-token"
TOPICS = (
    "backup server deploy database index search meeting budget travel flight hotel dinner birthday doctor garden "
    "coffee release bug benchmark latency recall vector keyword embedding provider config watcher agent session"
).split()
NAMES = "Dana Mika Atlas Vault Kyoto Lisbon Porto Oslo Berlin Alice Bob Carol Dave Erin Frank Grace".split()
FILLER = (
    "the team agreed to check it again next week and write down what changed since the last review so that "
    "nobody repeats the same work twice while the numbers stay comparable across runs and machines"
).split()


def section(rng: random.Random, i: int) -> str:
    topic, other, name = rng.choice(TOPICS), rng.choice(TOPICS), rng.choice(NAMES)
    words = rng.sample(FILLER, 18)
    return (
        f"## {name} {topic} note {i}\n\n"
        f"{name} said the {topic} plan for {other} is due on 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}; "
        + " ".join(words)
        + f" (ticket {topic[:3].upper()}-{i}).\n"
    )


def build_workspace(root: Path, chunks: int) -> Path:
    rng = random.Random(7)
    ws = root / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe staging database is Postgres 16 on port 5433.\n")
    n = 0
    day = 0
    while n < chunks:
        text = "".join(section(rng, n + k) + "\n" for k in range(SECTIONS_PER_FILE))
        (ws / "memory" / f"2025-{1 + day // 28:02d}-{1 + day % 28:02d}.md").write_text(f"# Log\n\n{text}")
        n += SECTIONS_PER_FILE
        day += 1
    return ws


def write_config(path: Path, ws: Path, provider: str, store: str) -> Path:
    ms: dict[str, Any] = {
        "provider": provider,
        "store": {"path": store},
        "chunking": {"tokens": 96, "overlap": 8, "windowTokens": 0},
        "sources": ["memory", "sessions"],  # what the service searches: `index` then prunes old retained turns
    }
    if provider == "local":
        ms["local"] = {"modelPath": str(MINILM), "threads": 2}
    path.write_text(
        json.dumps({"agents": {"defaults": {"memorySearch": ms}, "list": [{"id": "main", "workspace": str(ws)}]}})
    )
    return path


def run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "mdmem", *cmd, "--json"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"mdmem {' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


class Server:
    def __init__(self, config: Path, env: dict[str, str], log: Path, extra: list[str] = ()) -> None:  # type: ignore[assignment]
        self.port = free_port()
        self.log = open(log, "ab")  # noqa: SIM115
        env = {**env, "MEMORY_API_TOKEN": TOKEN}
        cmd = [sys.executable, "-m", "mdmem", "serve", "--config", str(config), "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("serve did not start; see " + str(log))
            time.sleep(0.2)

    def request(self, method: str, path: str, body: Any = None, conn: http.client.HTTPConnection | None = None):
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
        if own:
            conn.close()
        return resp.status, payload

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of ``pid`` and its live children (the recall workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def queries(n: int) -> list[dict[str, Any]]:
    rng = random.Random(11)
    out = []
    for _ in range(n):
        text = f"what did {rng.choice(NAMES)} decide about the {rng.choice(TOPICS)} plan?"
        msgs = [
            {"role": "assistant", "content": f"We were talking about {rng.choice(TOPICS)}."},
            {"role": "user", "content": [{"type": "text", "text": text}]},
        ]
        out.append({"agent_id": "main", "messages": msgs, "metadata": {"path": "openai", "type": "memory"}})
    return out


def run_clients(client: Callable[[int], None]) -> float:
    """Run ``client(k)`` on CLIENTS threads at once; the wall time until the last one ends, in seconds."""
    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def recall_load(server: Server, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    for body in bodies[:8]:  # warm-up: model load, page cache
        server.request("POST", "/recall", body)
    latencies: list[float] = []
    errors = 0
    blocks_seen: list[int] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        for body in bodies[k::CLIENTS]:
            t = time.perf_counter()
            status, payload = server.request("POST", "/recall", body, conn)
            ms = (time.perf_counter() - t) * 1000
            with lock:
                if status == 200:
                    latencies.append(ms)
                    blocks_seen.append(len(json.loads(payload)["memories"]))
                else:
                    errors += 1
        conn.close()

    cpu = cpu_seconds(server.proc.pid)
    wall = run_clients(client)
    cpu = cpu_seconds(server.proc.pid) - cpu
    q = statistics.quantiles(latencies, n=100)
    return {
        "serverCpuMsPerRecall": round(cpu * 1000 / max(1, len(latencies)), 2),
        "requests": len(latencies),
        "errors": errors,
        "p50Ms": round(q[49], 1),
        "p95Ms": round(q[94], 1),
        "maxMs": round(max(latencies), 1),
        "perSecond": round(len(latencies) / wall, 1),
        "meanBlocks": round(statistics.mean(blocks_seen), 2),
    }


def retain_load(server: Server, ws: Path, seconds: float) -> dict[str, Any]:
    acked: set[str] = set()
    errors = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        i = 0
        while time.monotonic() < stop:
            eid = f"hist1_bench{k}_{i}"
            body = retain_body("main", openai_entry(f"bench turn {k} {i} about the backup", f"answer {i}", id=eid))
            status, payload = server.request("POST", "/retain", body, conn)
            with lock:
                if status == 202 and json.loads(payload)["status"] == "retained":
                    acked.add(eid)
                else:
                    errors += 1
            i += 1
        conn.close()

    wall = run_clients(client)
    found: set[str] = set()
    for path in (ws / "sessions").glob("*.md"):
        got, _ = blocks.blocks(path.read_bytes())
        found.update(b.entry_id for b in got)
    return {
        "entries": len(acked),
        "seconds": round(wall, 2),
        "perSecond": round(len(acked) / wall, 1),
        "errors": errors,
        "lost": len(acked - found),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--retain-seconds", type=float, default=10.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workdir", type=Path, help="keep the workspace and indexes here (reused by later runs)")
    ap.add_argument("--only", choices=("minilm", "keyword"), help="measure one index only")
    ap.add_argument("--serve-args", default="", help="extra `mdmem serve` arguments, e.g. '--recall-workers 0'")
    args = ap.parse_args()
    if not MINILM.is_file():
        raise SystemExit(f"{MINILM} is missing")
    report: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="mdmemory-service-load-") as tmp:
        root = args.workdir.resolve() if args.workdir else Path(tmp)
        ws = root / "ws" if (root / "ws").is_dir() else build_workspace(root, args.chunks)
        env = {**os.environ, "MDMEMORY_HOME": str(root / "home"), "HF_HUB_OFFLINE": "1"}
        bodies = queries(args.queries)
        for name, provider in (("minilm", "local"), ("keyword", "none")):
            if args.only and name != args.only:
                continue
            cfg = write_config(root / f"{name}.json", ws, provider, f"{{home}}/state/{name}/{{agentId}}.sqlite")
            # no turns retained by an earlier run or phase; the folder stays (a missing one holds its rows)
            shutil.rmtree(ws / "sessions", ignore_errors=True)
            (ws / "sessions").mkdir()
            t = time.perf_counter()
            indexed = run(["index", "--config", str(cfg)], env)
            status = run(["status", "--config", str(cfg)], env)
            print(f"{name}: indexed {status['chunks']} chunks in {time.perf_counter() - t:.1f} s", file=sys.stderr)
            server = Server(cfg, env, root / f"{name}.log", args.serve_args.split())
            try:
                health = json.loads(server.request("GET", "/healthz")[1])
                result = recall_load(server, bodies)
                result["recallWorkers"] = health.get("recallWorkers", 0)
                result["chunks"] = status["chunks"]
                if name == "minilm":
                    result["retain"] = retain_load(server, ws, args.retain_seconds)
            finally:
                server.stop()
            del indexed
            report[name] = result
            print(f"{name}: {json.dumps(result)}", file=sys.stderr)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
