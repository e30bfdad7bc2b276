"""The distribution check (`make dist-check`): build the sdist and the wheel, check them, install the wheel
(not the source tree) into a fresh virtualenv and run what a user runs.

1. ``python -m build``: the sdist, then the wheel built from that sdist (so the sdist is complete too);
   ``twine check --strict``; the wheel holds every file under ``mdmem/`` (every subpackage, every data
   file), its ``mdmem`` command and every extra of pyproject.toml.
2. A fresh virtualenv, the wheel installed, run from outside the source tree: ``make run``'s job (index
   workspace-template/ into a temporary state folder, the two sample searches, status) with the installed
   command.
3. Every extra of pyproject.toml installed from the wheel in turn, and what it is for started: ``local`` (its
   prebuilt llama.cpp binding, xllamacpp: nothing compiled; with the shared MiniLM model, a hybrid index
   and search and ``model pull`` finding it), ``remote`` (the OpenAI client wired in), ``mcp`` (the server
   answers ``tools/list`` and a search over stdio), ``server`` (``mdmem serve`` answers ``/healthz`` and a
   recall), ``postgres`` (the driver reports an unreachable database as the store state), ``bench``
   (matplotlib draws), ``test`` (the tools start). An extra without a smoke here fails the check.
4. ``pip check``.

Prints one line per step with its time; exits 1 when any step failed. Options: ``--wheelhouse DIR`` (where the
llama-cpp-python wheel is; default: the newest under ~/.cache/mdmemory/wheels), ``--model GGUF``, ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "workspace-template"
SHARED = Path(os.environ.get("MDMEMORY_TEST_SHARED") or ROOT.parent / "shared")
MINILM = SHARED / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
TOOLS = {"memory_search", "memory_get", "memory_pack", "memory_truth", "memory_status", "memory_remember"}


class Failed(Exception):
    """A step's check failed: what was expected and what came."""


class Check:
    """The temporary folder, the fresh virtualenv and the commands run in it."""

    def __init__(self, tmp: Path, wheelhouse: Path | None, model: Path | None) -> None:
        self.tmp, self.wheelhouse, self.model = tmp, wheelhouse, model
        self.workspace = shutil.copytree(TEMPLATE, tmp / "workspace")  # serve writes sessions/: not in the source tree
        self.venv = tmp / "venv"
        self.bin = self.venv / "bin"
        self.wheel: Path | None = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MDMEMORY_", "PYTHON", "VIRTUAL_ENV"))}
        self.env.update(HF_HUB_OFFLINE="1", MDMEMORY_DAEMON="off", PIP_DISABLE_PIP_VERSION_CHECK="1")

    def run(self, *cmd: str | Path, env: dict[str, str] | None = None, ok: bool = True, timeout: float = 300) -> str:
        """Run ``cmd`` outside the source tree; its stdout (stderr too in the error when it fails)."""
        done = subprocess.run(
            [str(c) for c in cmd],
            cwd=self.tmp,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if ok and done.returncode != 0:
            said = done.stdout[-2000:] + done.stderr[-3000:]
            raise Failed(f"`{' '.join(map(str, cmd))}` exited {done.returncode}:\n{said}")
        if "Traceback" in done.stderr:
            raise Failed(f"`{' '.join(map(str, cmd))}` printed a traceback:\n{done.stderr[-3000:]}")
        return done.stdout

    def home(self, name: str, config: dict[str, Any] | None = None) -> dict[str, str]:
        """The environment of a command on its own state folder (and config) over a copy of workspace-template/."""
        home = self.tmp / name
        home.mkdir(exist_ok=True)
        env = {"MDMEMORY_HOME": str(home), "MDMEMORY_WORKSPACE": str(self.workspace)}
        if config is not None:
            path = home / "config.json5"
            path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(self.workspace), **config}}}))
            env["MDMEMORY_CONFIG"] = str(path)
        return env

    def mdmem(self, *args: str, env: dict[str, str], ok: bool = True) -> str:
        return self.run(self.bin / "mdmem", *args, env=env, ok=ok)

    def pip_install(self, *specs: str) -> None:
        links = ["--find-links", str(self.wheelhouse)] if self.wheelhouse else []
        # llama-cpp-python only ever as a built wheel: the smoke never compiles it
        only = ["--only-binary", "llama-cpp-python"]
        self.run(self.bin / "pip", "install", "--quiet", *only, *links, *specs, timeout=600)


# -- 1. build and inspect ------------------------------------------------------------------------------------------
def build(check: Check) -> str:
    dist = check.tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], check=True, capture_output=True, text=True
    )
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise Failed(f"expected one wheel and one sdist in {dist}, found {[p.name for p in dist.iterdir()]}")
    check.wheel = wheels[0]
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, wheels + sdists)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise Failed(f"twine check failed:\n{out.stdout}{out.stderr}")
    return f"{wheels[0].name}, {sdists[0].name}; twine check --strict passed"


def source_files() -> set[str]:
    """Every file of the package in the source tree (code and data), as paths relative to the root."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "mdmem").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }


def inspect(check: Check) -> str:
    assert check.wheel is not None
    with zipfile.ZipFile(check.wheel) as wheel:
        names = set(wheel.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(info).decode()
        entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    packaged = {n for n in names if n.startswith("mdmem/")}
    missing = sorted(source_files() - packaged)
    if missing:
        raise Failed(f"the wheel lacks {len(missing)} file(s) of the package: {missing[:10]}")
    for command in ("mdmem", "mdmemory"):  # mdmemory: the old name, an alias until 0.3
        if f"{command} = mdmem.cli.entry:main" not in entry_points:
            raise Failed(f"the wheel has no `{command}` command:\n{entry_points}")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    declared = {line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    if declared != extras:
        raise Failed(f"the wheel's extras {sorted(declared)} are not pyproject's {sorted(extras)}")
    sdist = next(check.wheel.parent.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    lacking = sorted((source_files() | {"pyproject.toml", "README.md"}) - in_sdist)
    if lacking:
        raise Failed(f"the sdist lacks {lacking[:10]}")
    packages = {Path(n).parent.as_posix() for n in packaged if n.endswith("/__init__.py")}
    return f"{len(packaged)} package files in {len(packages)} packages, extras {', '.join(sorted(extras))}"


# -- 2. the wheel in a fresh virtualenv: make run's job -----------------------------------------------------------
def install(check: Check) -> str:
    subprocess.run([sys.executable, "-m", "venv", str(check.venv)], check=True)
    assert check.wheel is not None
    check.pip_install(str(check.wheel))
    where = check.run(check.bin / "python", "-c", "import mdmem; print(mdmem.__file__)").strip()
    if not where.startswith(str(check.venv)):
        raise Failed(f"mdmem was imported from {where}, not from the virtualenv")
    version = check.run(check.bin / "mdmem", "--version").strip()
    return f"{version} from {Path(where).parent}"


def make_run(check: Check) -> str:
    env = check.home("run")
    check.mdmem("index", env=env)
    for query, path in (("when do the backups run", "MEMORY.md"), ("寿司", "MEMORY.md")):
        found = json.loads(check.mdmem("search", query, "--json", env=env))
        if not found["results"] or found["results"][0]["path"] != path:
            raise Failed(f"search {query!r} found {[r['path'] for r in found['results']]}, not {path}")
    check.mdmem("search", "when do the backups run", env=env)  # and as text
    status = json.loads(check.mdmem("status", "--json", env=env))
    if status["files"] != 2 or status["staleFiles"]:
        raise Failed(f"status after the index: {status['files']} files, stale {status['staleFiles']}")
    check.mdmem("status", env=env)
    return f"index, 2 searches, status: {status['files']} files, {status['chunks']} chunks, {status['mode']}"


# -- 3. each extra, installed from the wheel ------------------------------------------------------------------------
def smoke_local(check: Check) -> str:
    modules = "huggingface_hub, gguf, safetensors, mdmem.providers.local as local"
    binding = check.run(check.bin / "python", "-c", f"import {modules}; print(local.choose_binding())").strip()
    if binding != "xllamacpp":  # the extra's own binding: prebuilt, nothing compiled
        raise Failed(f"the local extra's binding is {binding!r}, not xllamacpp")
    if check.model is None or not check.model.is_file():
        check.mdmem("model", "convert", "--help", env=check.home("local"))
        return f"imports; no model at {check.model}: no hybrid search run"
    env = check.home("local", {"memorySearch": {"provider": "local", "local": {"modelPath": str(check.model)}}})
    check.mdmem("index", env=env)
    found = json.loads(check.mdmem("search", "when do the backups run", "--json", env=env))
    if found["mode"] != "hybrid" or not found["results"]:
        raise Failed(f"local search: mode {found['mode']}, {len(found['results'])} result(s), {found.get('warnings')}")
    pulled = json.loads(check.mdmem("model", "pull", "--json", env=env))
    if not pulled["alreadyPresent"]:
        raise Failed(f"model pull of the configured local model: {pulled}")
    return f"hybrid search with {check.model.name} through {binding}; model pull finds it there"


def smoke_remote(check: Check) -> str:
    check.run(check.bin / "python", "-c", "import openai, mdmem.providers.remote")
    env = check.home("remote", {"memorySearch": {"provider": "openai"}})
    status = json.loads(check.mdmem("status", "--json", env=env))
    said = " ".join(d["message"] for d in status["degraded"])
    if "OPENAI_API_KEY" not in said:  # the client is there: what it lacks is a key
        raise Failed(f"status with provider openai and no key says: {said}")
    return "the OpenAI client loads; without a key status asks for OPENAI_API_KEY"


def smoke_mcp(check: Check) -> str:
    env = {**check.env, **check.home("mcp")}
    proc = subprocess.Popen(
        [str(check.bin / "mdmem"), "mcp"],
        cwd=check.tmp,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(message: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" not in message:
            return None
        while line := proc.stdout.readline():
            reply = json.loads(line)
            if reply.get("id") == message["id"]:
                return dict(reply)
        raise Failed(f"the MCP server closed its output; stderr: {proc.stderr.read() if proc.stderr else ''}")

    try:
        client = {"name": "dist-check", "version": "1"}
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        names = {t["name"] for t in (listed or {}).get("result", {}).get("tools", [])}
        if names != TOOLS:
            raise Failed(f"tools/list: {sorted(names)}")
        call = {"name": "memory_search", "arguments": {"query": "when do the backups run"}}
        answer = ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call}) or {}
        result = answer.get("result", {})
        if result.get("isError") or not result.get("structuredContent", {}).get("results"):
            raise Failed(f"tools/call memory_search: {json.dumps(answer)[:500]}")
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return "tools/list over stdio: " + ", ".join(sorted(names)) + "; memory_search answers"


def smoke_server(check: Check) -> str:
    env = {**check.env, **check.home("serve")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = check.tmp / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(check.bin / "mdmem"), "serve", "--port", str(port), "--recall-workers", "0"],
            cwd=check.tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while "ready:" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Failed(f"mdmem serve did not get ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        base = f"http://127.0.0.1:{port}"
        health = json.loads(urllib.request.urlopen(f"{base}/healthz", timeout=10).read())
        if not health.get("ok"):
            raise Failed(f"/healthz: {health}")
        token = (Path(env["MDMEMORY_HOME"]) / "state" / "service-token").read_text().strip()
        body = {"agent_id": "main", "messages": [{"role": "user", "content": "when do the backups run"}]}
        request = urllib.request.Request(
            f"{base}/recall",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        recall = json.loads(urllib.request.urlopen(request, timeout=30).read())
        if not recall.get("memories"):
            raise Failed(f"/recall: {recall}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return f"serve: /healthz ok, /recall gave {len(recall['memories'])} memories"


def smoke_postgres(check: Check) -> str:
    check.run(check.bin / "python", "-c", "import psycopg, psycopg_pool; psycopg.pq.version()")
    check.mdmem("store", "migrate", "--help", env=check.home("pg"))
    with socket.socket() as s:  # a port nothing listens on: the driver's connection error, as status reports it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = {"backend": "postgres", "url": f"postgresql://mdmemory@127.0.0.1:{port}/mdmemory"}
    env = check.home("pg", {"memorySearch": {"provider": "none", "store": store}})
    status = json.loads(check.mdmem("status", "--json", env=env, ok=False))
    state = (status.get("storeState") or {}).get("state")
    if status.get("backend") != "postgres" or state in (None, "ok"):
        raise Failed(f"status of an unreachable PostgreSQL: backend {status.get('backend')}, state {state}")
    return f"psycopg loads; an unreachable database shows as store state {state!r}"


def smoke_bench(check: Check) -> str:
    code = "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.close()"
    check.run(check.bin / "python", "-c", code)
    return "matplotlib draws (Agg)"


def smoke_test(check: Check) -> str:
    for tool in ("pytest", "ruff", "mypy", "mkdocs", "twine"):
        check.run(check.bin / tool, "--version")
    check.run(check.bin / "python", "-c", "import build, hypothesis, pgserver, detect_secrets")
    return "pytest, ruff, mypy, mkdocs, twine, build start; hypothesis, pgserver import"


SMOKES: dict[str, Callable[[Check], str]] = {
    "local": smoke_local,
    "remote": smoke_remote,
    "mcp": smoke_mcp,
    "server": smoke_server,
    "postgres": smoke_postgres,
    "bench": smoke_bench,
    "test": smoke_test,
}


def extra_step(name: str) -> Callable[[Check], str]:
    def step(check: Check) -> str:
        if name not in SMOKES:
            raise Failed(f"pyproject.toml has an extra {name!r} this check has no smoke for: add one to SMOKES")
        check.pip_install(f"{check.wheel}[{name}]")
        return SMOKES[name](check)

    return step


def pip_check(check: Check) -> str:
    return check.run(check.bin / "pip", "check").strip()


# -- running ----------------------------------------------------------------------------------------------------------
def default_wheelhouse() -> Path | None:
    found = sorted(Path.home().glob(".cache/mdmemory/wheels/*/llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wheelhouse", type=Path, default=None, help="folder with the llama-cpp-python wheel")
    parser.add_argument("--model", type=Path, default=MINILM, help="a GGUF embedding model for the local smoke")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    wheelhouse = args.wheelhouse or default_wheelhouse()
    extras = list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    steps: list[tuple[str, Callable[[Check], str]]] = [
        ("build", build),
        ("wheel contents", inspect),
        ("install", install),
        ("make run's job", make_run),
        *((f"extra {name}", extra_step(name)) for name in extras),
        ("pip check", pip_check),
    ]
    tmp = Path(tempfile.mkdtemp(prefix="mdmemory-dist-"))
    check = Check(tmp, wheelhouse, args.model)
    failed = 0
    started = time.monotonic()
    try:
        for name, step in steps:
            t0 = time.monotonic()
            try:
                said = step(check)
            except (Failed, subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
                detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else exc
                print(f"FAIL {name:16} {time.monotonic() - t0:6.1f} s  {detail}", flush=True)
                failed += 1
                if name in ("build", "install"):
                    break  # nothing after these can run
                continue
            print(f"ok   {name:16} {time.monotonic() - t0:6.1f} s  {said}", flush=True)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.monotonic() - started
    print(f"{'FAILED' if failed else 'passed'}: distribution check in {total:.0f} s ({failed} step(s) failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
