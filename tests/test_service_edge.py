"""Who may call ``mdmem serve``: the token (generated when none is set), the loopback mode, and requests a
web page can send (a text/plain form post, a foreign ``Origin``, a rebound DNS name in ``Host``), against a
real uvicorn process over real sockets."""

from __future__ import annotations

import http.client
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.service.edge import host_is_loopback, refusal
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "edge-token-7c2f1a9b"


def raw(
    svc: Service,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One request with exactly ``headers`` (``Host`` included: nothing is added but Content-Length)."""
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if method == "POST":
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data or None)
        reply = conn.getresponse()
        content = reply.read()
        return reply.status, json.loads(content) if content else None
    finally:
        conn.close()


def _serve(tmp_path: Path, token: str | None, **service: Any) -> Service:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe harbour crane is serviced on Tuesdays.\n")
    cfg = write_config(tmp_path / "config.json", {"main": ws}, recallWorkers=0, **service)
    svc = Service(cfg, tmp_path / "home", token, tmp_path / "serve.log")
    svc.start()
    return svc


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Service]:
    """A service with ``auth: "loopback"``: no token."""
    svc = _serve(tmp_path, None, auth="loopback")
    yield svc
    svc.stop()


@pytest.fixture
def tokened(tmp_path: Path) -> Iterator[Service]:
    svc = _serve(tmp_path, TOKEN)
    yield svc
    svc.stop()


def _local(svc: Service, **more: str) -> dict[str, str]:
    return {"Host": f"127.0.0.1:{svc.port}", "Content-Type": "application/json", **more}


def _sessions(tmp_path: Path) -> str:
    folder = tmp_path / "ws" / "sessions"
    return "".join(p.read_text() for p in folder.glob("*.md")) if folder.is_dir() else ""


def test_a_web_page_cannot_write_erase_or_read_memory_without_a_token(loopback: Service, tmp_path: Path) -> None:
    svc = loopback
    entry = openai_entry("remember the gate code is 4711", "Noted.", id="hist1_browser")
    # A form or fetch POST from any page: text/plain, no preflight, with the page's Origin.
    page = {"Host": f"127.0.0.1:{svc.port}", "Origin": "http://evil.example", "Content-Type": "text/plain"}
    status, body = raw(svc, "POST", "/retain", retain_body("main", entry), page)
    assert status == 403 and "Origin header" in body["error"]
    status, _ = raw(svc, "POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_x"]}, page)
    assert status == 403
    # The same without an Origin (a client that drops it): the content type alone is refused, naming the header.
    plain = {"Host": f"127.0.0.1:{svc.port}", "Content-Type": "text/plain"}
    status, body = raw(svc, "POST", "/retain", retain_body("main", entry), plain)
    assert status == 415 and "Content-Type header" in body["error"] and "application/json" in body["error"]
    status, body = raw(svc, "POST", "/retain", retain_body("main", entry), {"Host": "127.0.0.1"})
    assert status == 415 and "got none" in body["error"]
    # DNS rebinding: the page's own name resolves to 127.0.0.1, so reads are "same-origin" GETs without Origin.
    rebound = {"Host": f"attacker.example:{svc.port}"}
    for path in ("/agents/main/status", "/healthz", "/.claw-describe.json"):
        status, body = raw(svc, "GET", path, None, rebound)
        assert status == 403 and "Host header" in body["error"], path
    status, body = raw(svc, "POST", "/recall", recall_body("main", "harbour crane"), _local(svc, **rebound))
    assert status == 403 and "Host header" in body["error"]
    # A browser's same-origin GET also says where it comes from.
    same_origin = {"Host": f"localhost:{svc.port}", "Sec-Fetch-Site": "same-origin"}
    assert raw(svc, "GET", "/agents/main/status", None, same_origin)[0] == 403
    assert "hist1_browser" not in _sessions(tmp_path)  # nothing was written
    # Local programs still work without a token, by any loopback name.
    status, body = raw(svc, "POST", "/retain", retain_body("main", entry), _local(svc))
    assert status == 202 and body["status"] == "retained"
    for host in (f"localhost:{svc.port}", "127.0.0.1", f"[::1]:{svc.port}", "127.8.9.10"):
        status, body = raw(svc, "POST", "/recall", recall_body("main", "harbour crane"), _local(svc, Host=host))
        assert status == 200 and body["memories"], host
    assert raw(svc, "GET", "/agents/main/status", None, {"Host": f"localhost:{svc.port}"})[0] == 200
    status, body = raw(svc, "GET", "/healthz", None, {"Host": f"127.0.0.1:{svc.port}", "Sec-Fetch-Site": "none"})
    assert status == 200 and body["ok"] is True  # a person typing the URL in the address bar


def test_with_a_token_a_page_is_refused_even_with_the_token(tokened: Service) -> None:
    svc = tokened
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = recall_body("main", "harbour crane")
    assert raw(svc, "POST", "/recall", body, _local(svc, **auth))[0] == 200
    assert raw(svc, "POST", "/recall", body, _local(svc))[0] == 401
    status, reply = raw(svc, "POST", "/recall", body, _local(svc, Origin="http://localhost:3000", **auth))
    assert status == 403 and "Origin" in reply["error"]
    assert raw(svc, "POST", "/recall", body, _local(svc, **auth) | {"Content-Type": "text/plain"})[0] == 415
    # With a token, any Host is served (a reverse proxy may forward its own): the token is the guard.
    assert raw(svc, "POST", "/recall", body, _local(svc, Host="memory.internal:8443", **auth))[0] == 200
    assert raw(svc, "POST", "/recall", body, _local(svc, Host="memory.internal:8443"))[0] == 401


def test_without_a_configured_token_one_is_generated_kept_private_and_reused(tmp_path: Path) -> None:
    svc = _serve(tmp_path, None)
    token_file = tmp_path / "home" / "state" / "service-token"
    try:
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32 and svc.token == token
        body = recall_body("main", "harbour crane")
        assert raw(svc, "POST", "/recall", body, _local(svc))[0] == 401
        assert raw(svc, "POST", "/recall", body, _local(svc, Authorization=f"Bearer {token}"))[0] == 200
    finally:
        svc.stop()
    log = svc.log.read_text()
    assert str(token_file) in log and token not in log  # the start line names the file, never the token
    svc.token = None
    svc.start()  # a restart reuses it
    try:
        assert svc.token == token
    finally:
        svc.stop()
    token_file.chmod(0o644)  # readable by others: refused, saying how to fix it
    out = _serve_exit(tmp_path, {})
    assert out.returncode == 2 and "chmod 600" in out.stderr and token not in out.stderr


def _serve_exit(tmp_path: Path, env: dict[str, str], *args: str, **service: Any) -> subprocess.CompletedProcess[str]:
    cfg = write_config(tmp_path / "exit.json", {"main": tmp_path / "ws"}, recallWorkers=0, **service)
    full = {"MDMEMORY_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    full["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "mdmem", "serve", "--config", str(cfg), "--port", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**full, **env}, timeout=60)


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_token_refuses_to_start_on_any_address(tmp_path: Path, blank: str) -> None:
    for host in ("0.0.0.0", "127.0.0.1"):
        out = _serve_exit(tmp_path, {"MEMORY_API_TOKEN": blank}, "--host", host)
        assert out.returncode == 2 and "MEMORY_API_TOKEN is set but blank" in out.stderr and "Fix:" in out.stderr
    out = _serve_exit(tmp_path, {}, "--host", "0.0.0.0", token=blank)
    assert out.returncode == 2 and "service.token is set but blank" in out.stderr


def test_loopback_mode_refuses_a_public_address_and_a_token(tmp_path: Path) -> None:
    out = _serve_exit(tmp_path, {}, "--host", "0.0.0.0", auth="loopback")
    assert out.returncode == 2 and "0.0.0.0" in out.stderr and "Fix:" in out.stderr
    out = _serve_exit(tmp_path, {"MEMORY_API_TOKEN": TOKEN}, auth="loopback")
    assert out.returncode == 2 and "MEMORY_API_TOKEN" in out.stderr and TOKEN not in out.stderr
    out = _serve_exit(tmp_path, {"MEMORY_API_TOKEN": "two words"})
    assert out.returncode == 2 and "MEMORY_API_TOKEN" in out.stderr and "two words" not in out.stderr


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("LOCALHOST:8080", True),
        ("127.0.0.1", True),
        ("127.255.0.9:1", True),
        ("[::1]", True),
        ("[::1]:8080", True),
        ("[::ffff:127.0.0.1]:80", True),
        ("localhost.", False),
        ("localhost.evil.example", False),
        ("evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("127.1", False),
        ("2130706433", False),
        ("::1", False),
        ("[127.0.0.1]", False),
        ("10.0.0.1", False),
        ("localhost:80x", False),
        ("[::1]x", False),
        ("", False),
    ],
)
def test_host_is_loopback(host: str, ok: bool) -> None:
    assert host_is_loopback(host) is ok


@pytest.mark.parametrize(
    ("method", "headers", "loopback_only", "status"),
    [
        ("POST", [("host", "localhost"), ("content-type", "application/json")], True, None),
        ("POST", [("host", "localhost"), ("content-type", "Application/JSON; charset=utf-8")], True, None),
        ("POST", [("host", "localhost"), ("content-type", "text/plain")], True, 415),
        ("POST", [("host", "localhost"), ("content-type", "application/x-www-form-urlencoded")], False, 415),
        ("POST", [("host", "localhost"), ("content-type", "multipart/form-data; boundary=x")], False, 415),
        ("POST", [("host", "x"), ("content-type", "application/json"), ("content-type", "text/plain")], False, 415),
        ("POST", [("host", "localhost"), ("content-type", "application/json"), ("origin", "null")], True, 403),
        ("GET", [("host", "localhost"), ("origin", "http://localhost:8080")], True, 403),  # same origin too
        ("GET", [("host", "localhost"), ("sec-fetch-site", "same-origin")], False, 403),
        ("GET", [("host", "localhost"), ("sec-fetch-site", "none")], True, None),
        ("GET", [("host", "evil.example")], True, 403),
        ("GET", [("host", "evil.example")], False, None),
        ("GET", [], True, 400),
        ("GET", [("host", "localhost"), ("host", "evil.example")], True, 400),
    ],
)
def test_refusal_table(method: str, headers: list[tuple[str, str]], loopback_only: bool, status: int | None) -> None:
    got = refusal(method, headers, loopback_only)
    assert (got[0] if got else None) == status
