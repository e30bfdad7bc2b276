"""Pods (``service.podScope``, mdmem.service.pods): two pods that name an agent alike never share its
memory — recall, retain, forget and status, through a real ``mdmem serve`` fed cllama's bodies, on SQLite
and PostgreSQL — and a request without ``pod`` is served as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import cllama_turns
from tests.conftest import both_backends
from tests.service_server import Service

TOKEN = "test-token-pods-8c2f1a"
ROCKET = ("The launch code for the rocket demo is ORCHID-5521.", "Noted: ORCHID-5521 for the rocket demo.")
BALLOON = ("The launch code for the balloon test is TULIP-8830.", "Noted: TULIP-8830 for the balloon test.")
ASK_ROCKET = "What is the launch code for the rocket demo?"
ASK_BALLOON = "What is the launch code for the balloon test?"


# -- through a real service --------------------------------------------------------------------------------


def _config(
    tmp_path: Path, store: dict[str, Any], agents: list[dict[str, Any]], **service: Any
) -> tuple[Path, dict[str, Path]]:
    workspaces = {}
    for a in agents:
        ws = tmp_path / f"ws-{a['id']}"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# Memory\n\nNothing about launches here.\n")
        workspaces[a["id"]] = ws
    ms: dict[str, Any] = {"provider": "hash", **({"store": store} if store else {})}
    listed = [{**a, "workspace": str(workspaces[a["id"]])} for a in agents]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": ms}, "list": listed}, "service": service}))
    return cfg, workspaces


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    started: list[Service] = []

    def run(cfg: Path) -> Service:
        svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / f"serve-{len(started)}.log")
        svc.start()
        started.append(svc)
        return svc

    yield run
    for svc in started:
        svc.stop()


def _retain(svc: Service, agent: str, pod: str | None, said: tuple[str, str], minute: int = 0) -> tuple[int, Any]:
    t = cllama_turns.turn(agent, said[0], said[1], pod=pod, ts=f"2026-11-23T14:{minute:02d}:07Z")
    reply = svc.call("POST", "/retain", raw=t.retain)
    return reply.status, reply.body | {"entry_id": t.entry.id} if isinstance(reply.body, dict) else reply.body


def _recalled(svc: Service, agent: str, pod: str | None, question: str) -> tuple[int, str]:
    reply = svc.call("POST", "/recall", raw=cllama_turns.recall(agent, question, pod=pod))
    text = json.dumps(reply.body["memories"]) if reply.status == 200 else json.dumps(reply.body)
    return reply.status, text


@both_backends
def test_a_configured_agent_serves_the_first_pod_and_refuses_the_other(
    tmp_path: Path, start: Any, store_backend: dict[str, Any]
) -> None:
    cfg, ws = _config(tmp_path, store_backend, [{"id": "shared"}, {"id": "solo", "pod": "pod-b"}])
    svc = start(cfg)
    status, body = _retain(svc, "shared", "pod-a", ROCKET)
    assert (status, body["status"]) == (202, "retained")
    code, text = _recalled(svc, "shared", "pod-a", ASK_ROCKET)
    assert code == 200 and "ORCHID-5521" in text

    # pod-b names the same agent: every operation is refused, naming both pods, and nothing is written
    code, text = _recalled(svc, "shared", "pod-b", ASK_ROCKET)
    assert code == 403 and "ORCHID" not in text and "'pod-a'" in text and "'pod-b'" in text
    status, refused = _retain(svc, "shared", "pod-b", BALLOON, minute=1)
    assert status == 403 and "'pod-a'" in refused["error"] and "'pod-b'" in refused["error"]
    forget = svc.call("POST", "/forget", raw=cllama_turns.forget("shared", [body["entry_id"]], pod="pod-b"))
    assert forget.status == 403
    assert svc.call("GET", "/agents/shared/status?pod=pod-b").status == 403
    day = (ws["shared"] / "sessions" / "2026-11-23.md").read_text()
    assert "ORCHID-5521" in day and "TULIP" not in day  # pod-b's turn never reached pod-a's agent

    # the status says which pod it serves; a request without a pod is served as before pods counted
    own = svc.call("GET", "/agents/shared/status?pod=pod-a")
    assert own.status == 200 and own.body["pod"]["serves"]["pod"] == "pod-a"
    assert own.body["pod"]["serves"]["by"] == "first request" and own.body["pod"]["scope"] == "bind"
    code, text = _recalled(svc, "shared", None, ASK_ROCKET)
    assert code == 200 and "ORCHID-5521" in text

    # a binding: pod-a is refused on pod-b's agent even before anything was said there
    code, text = _recalled(svc, "solo", "pod-a", ASK_ROCKET)
    assert code == 403 and "agents.list[].pod" in text
    assert _recalled(svc, "solo", "pod-b", ASK_ROCKET)[0] == 200

    # the claim outlives the service: after a restart pod-b is refused still, even if it asks first
    svc.stop()
    svc = start(cfg)
    code, text = _recalled(svc, "shared", "pod-b", ASK_ROCKET)
    assert code == 403 and "ORCHID" not in text
    if store_backend:
        import psycopg

        with psycopg.connect(store_backend["url"]) as conn:
            rows = conn.execute(f"SELECT agent_id, pod FROM {store_backend['schema']}.pods ORDER BY 1").fetchall()
        assert rows == [("shared", "pod-a")]  # every replica reads it there
    else:
        claim = json.loads((tmp_path / "home" / "state" / "memory" / "shared.sqlite.pod.json").read_text())
        assert claim["pod"] == "pod-a" and claim["claimed_at"].endswith("Z")

    # forget from the pod that owns it works
    gone = svc.call("POST", "/forget", raw=cllama_turns.forget("shared", [body["entry_id"]], pod="pod-a"))
    assert gone.status == 204
    assert "ORCHID" not in _recalled(svc, "shared", "pod-a", ASK_ROCKET)[1]
    log = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    refusals = [json.loads(line) for line in log.splitlines() if '"status_code": 403' in line]
    assert refusals and all(r["pod"] in ("pod-a", "pod-b") for r in refusals)


@both_backends
def test_under_auto_agents_each_pod_has_its_own_agent(
    tmp_path: Path, start: Any, store_backend: dict[str, Any]
) -> None:
    cfg, _ = _config(tmp_path, store_backend, [{"id": "main"}], autoAgents=True)
    svc = start(cfg)
    home = tmp_path / "home"
    status, rocket = _retain(svc, "shared", "pod-a", ROCKET)
    assert (status, rocket["status"]) == (202, "retained")
    status, balloon = _retain(svc, "shared", "pod-b", BALLOON, minute=1)
    assert (status, balloon["status"]) == (202, "retained")
    claim = json.loads((home / "state" / "memory" / "shared.sqlite.pod.json").read_text())  # (PostgreSQL: a copy)
    assert claim["pod"] == "pod-a"
    assert (home / "agents" / "shared@pod-b" / "sessions" / "2026-11-23.md").is_file()

    for pod, own, other, ask_own, ask_other in (
        ("pod-a", "ORCHID-5521", "TULIP-8830", ASK_ROCKET, ASK_BALLOON),
        ("pod-b", "TULIP-8830", "ORCHID-5521", ASK_BALLOON, ASK_ROCKET),
    ):
        code, text = _recalled(svc, "shared", pod, ask_own)
        assert code == 200 and own in text, (pod, text)
        code, text = _recalled(svc, "shared", pod, ask_other)
        assert code == 200 and other not in text, (pod, text)

    # pod-b forgets pod-a's entry id: its own agent has no such entry; pod-a's memory keeps it
    assert (
        svc.call("POST", "/forget", raw=cllama_turns.forget("shared", [rocket["entry_id"]], pod="pod-b")).status == 204
    )
    assert "ORCHID-5521" in _recalled(svc, "shared", "pod-a", ASK_ROCKET)[1]
    assert (
        svc.call("POST", "/forget", raw=cllama_turns.forget("shared", [balloon["entry_id"]], pod="pod-b")).status == 204
    )
    assert "TULIP-8830" not in _recalled(svc, "shared", "pod-b", ASK_BALLOON)[1]
    assert "ORCHID-5521" in _recalled(svc, "shared", "pod-a", ASK_ROCKET)[1]

    # status of each pod's agent; a pod that never used it has none (a status creates nothing)
    b = svc.call("GET", "/agents/shared/status?pod=pod-b")
    assert b.status == 200 and b.body["agentId"] == "shared@pod-b" and b.body["pod"]["serves"]["pod"] == "pod-b"
    assert svc.call("GET", "/agents/shared/status?pod=pod-c").status == 404
    assert not (home / "agents" / "shared@pod-c").exists()
    if store_backend:
        import psycopg

        with psycopg.connect(store_backend["url"]) as conn:
            s = store_backend["schema"]
            ids = {r[0] for r in conn.execute(f"SELECT DISTINCT agent_id FROM {s}.files").fetchall()}
            claims = dict(conn.execute(f"SELECT agent_id, pod FROM {s}.pods").fetchall())
            holders = {r[0] for r in conn.execute(f"SELECT agent_id FROM {s}.workspaces").fetchall()}
        assert {"shared", "shared@pod-b"} <= ids and claims == {"shared": "pod-a"}
        assert {"shared", "shared@pod-b"} <= holders  # each its own workspace claim: they never collide
    else:
        names = {p.name for p in (home / "state" / "memory").glob("*.sqlite")}
        assert {"shared.sqlite", "shared@pod-b.sqlite"} <= names


def test_namespace_and_off(tmp_path: Path, start: Any) -> None:
    cfg, _ = _config(
        tmp_path / "ns", {}, [{"id": "main"}, {"id": "ops", "pod": "pod-a"}], autoAgents=True, podScope="namespace"
    )
    svc = start(cfg)
    assert _retain(svc, "shared", "pod-a", ROCKET)[0] == 202
    assert (tmp_path / "home" / "agents" / "shared@pod-a").is_dir()  # never the plain one under "namespace"
    assert not (tmp_path / "home" / "agents" / "shared").exists()
    assert "ORCHID" not in _recalled(svc, "shared", None, ASK_ROCKET)[1]  # no pod: the plain agent, empty
    assert "ORCHID" not in _recalled(svc, "shared", "pod-b", ASK_ROCKET)[1]
    assert _recalled(svc, "main", "pod-a", ASK_ROCKET)[0] == 200  # main is pod-a's own main@pod-a now
    assert (tmp_path / "home" / "agents" / "main@pod-a").is_dir()
    assert (
        _recalled(svc, "ops", "pod-a", ASK_ROCKET)[0] == 200
        and not (tmp_path / "home" / "agents" / "ops@pod-a").exists()
    )
    svc.stop()

    cfg, _ = _config(tmp_path / "off", {}, [{"id": "shared"}], podScope="off")
    svc = start(cfg)
    assert _retain(svc, "shared", "pod-a", ROCKET)[0] == 202
    code, text = _recalled(svc, "shared", "pod-b", ASK_ROCKET)
    assert code == 200 and "ORCHID-5521" in text  # pods ignored, as asked


@pytest.mark.parametrize("pod", ["../x", "a/b", "..", "x" * 65, "pod a", 5, ["pod-a"], "ghp_" + "a" * 36])
def test_a_bad_pod_is_refused_naming_the_field(tmp_path: Path, start: Any, pod: Any) -> None:
    cfg, ws = _config(tmp_path, {}, [{"id": "main"}], autoAgents=True)
    svc = start(cfg)
    body = json.loads(cllama_turns.turn("main", *ROCKET).retain)
    body["pod"] = pod
    reply = svc.call("POST", "/retain", body)
    assert reply.status == 400 and reply.body["error"].startswith("pod:")
    assert svc.call("POST", "/recall", {"agent_id": "main", "pod": pod, "messages": []}).status == 400
    assert not (ws["main"] / "sessions").exists() or not list((ws["main"] / "sessions").glob("*.md"))
    assert not [p for p in tmp_path.rglob("*") if "@" in p.name]  # no pod's agent was made


def test_a_pod_shares_an_agent_bound_to_every_pod(tmp_path: Path, start: Any) -> None:
    cfg, _ = _config(tmp_path, {}, [{"id": "library", "pod": "*"}])
    svc = start(cfg)
    assert _retain(svc, "library", "pod-a", ROCKET)[0] == 202
    code, text = _recalled(svc, "library", "pod-b", ASK_ROCKET)
    assert code == 200 and "ORCHID-5521" in text  # shared on purpose
    status = svc.call("GET", "/agents/library/status?pod=pod-b")
    assert status.status == 200 and status.body["pod"]["serves"] is None


def _backfill(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "MDMEMORY_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    cmd = [sys.executable, "-m", "mdmem", "backfill", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_backfill_replays_a_pods_ledger_into_that_pods_agent(tmp_path: Path, start: Any) -> None:
    """cllama keeps a ledger per pod (each pod runs its own proxy): ``--pod`` says whose it is, locally or
    through a running service, and the pod rule applies as to the proxy's own retains."""
    cfg, ws = _config(tmp_path, {}, [{"id": "main"}, {"id": "shared", "pod": "pod-a"}], autoAgents=True)
    ledger = tmp_path / "pod-b-history" / "shared" / "history.jsonl"
    ledger.parent.mkdir(parents=True)
    entries = [cllama_turns.turn("shared", *said, pod="pod-b").entry for said in (ROCKET, BALLOON)]
    ledger.write_bytes(b"".join(e.history_line() + b"\n" for e in entries))
    home = tmp_path / "home"
    done = _backfill(str(ledger), "--config", str(cfg), "--pod", "pod-b", home=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["retained"] == 2
    own = (home / "agents" / "shared@pod-b" / "sessions" / "2026-11-23.md").read_text()
    assert "ORCHID-5521" in own and "TULIP-8830" in own
    assert not (ws["shared"] / "sessions").exists()  # pod-a's agent got nothing
    svc = start(cfg)
    done = _backfill(str(ledger), "--url", svc.url, "--token", TOKEN, "--pod", "pod-b", home=home)
    assert done.returncode == 0 and json.loads(done.stdout)["duplicates"] == 2, done.stderr
    assert "ORCHID-5521" in _recalled(svc, "shared", "pod-b", ASK_ROCKET)[1]
    assert "ORCHID-5521" not in _recalled(svc, "shared", "pod-a", ASK_ROCKET)[1]
    bad = _backfill(str(ledger), "--config", str(cfg), "--pod", "../b", home=home)
    assert bad.returncode == 2 and "--pod" in bad.stderr


def test_with_postgresql_down_a_replica_with_the_files_claims_locally_and_the_database_takes_it_later(
    tmp_path: Path, start: Any
) -> None:
    """The files' host keeps retaining while the database is away (as it does without pods): the first pod's
    claim is made in ``<index>.pod.json``, refused pods stay refused, and the database takes that pod when it
    is back, for every replica."""
    from tests.pg_tcp import TcpPostgres

    pg = TcpPostgres()
    pg.start()
    try:
        store = {"backend": "postgres", "url": pg.url, "schema": "pods_down"}
        cfg, ws = _config(tmp_path, store, [{"id": "shared"}])
        svc = start(cfg)
        pg.stop("immediate")
        status, body = _retain(svc, "shared", "pod-a", ROCKET)
        assert (status, body["status"]) == (202, "retained")
        assert "ORCHID-5521" in (ws["shared"] / "sessions" / "2026-11-23.md").read_text()
        status, refused = _retain(svc, "shared", "pod-b", BALLOON, minute=1)
        assert status == 403 and "'pod-a'" in refused["error"]
        pg.start()
        status, refused = _retain(svc, "shared", "pod-b", BALLOON, minute=2)
        assert status == 403 and "'pod-a'" in refused["error"]
        import psycopg

        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT agent_id, pod FROM pods_down.pods").fetchall() == [("shared", "pod-a")]
        assert "TULIP" not in (ws["shared"] / "sessions" / "2026-11-23.md").read_text()
        svc.stop()
    finally:
        pg.stop()
        pg.remove()


def test_a_claim_that_cannot_be_written_yet_holds_in_the_process_and_is_written_when_it_can(
    tmp_path: Path, start: Any
) -> None:
    """Where indexes and their claims go is not a folder (as a broken volume leaves it): the files still take
    the retain, the process holds to the first pod's claim (pod-b stays refused), and writes it once it can."""
    cfg, ws = _config(tmp_path, {}, [{"id": "shared"}])
    svc = start(cfg)
    blocker = tmp_path / "home" / "state" / "memory"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    if blocker.is_dir():
        import shutil

        shutil.rmtree(blocker)
    blocker.write_text("not a folder")
    status, body = _retain(svc, "shared", "pod-a", ROCKET)
    assert (status, body["status"]) == (202, "retained")
    status, refused = _retain(svc, "shared", "pod-b", BALLOON, minute=1)
    assert status == 403 and "'pod-a'" in refused["error"]
    blocker.unlink()
    assert _recalled(svc, "shared", "pod-a", ASK_ROCKET)[0] == 200
    claim = json.loads((blocker / "shared.sqlite.pod.json").read_text())
    assert claim["pod"] == "pod-a"
    assert "TULIP" not in (ws["shared"] / "sessions" / "2026-11-23.md").read_text()
