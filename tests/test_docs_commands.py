"""The commands in README.md and docs/*.md run, and print what the docs say they print.

A fenced block preceded by ``<!-- runnable -->`` (options: ``<!-- runnable: setup, model -->``...) is run in a
temporary home; ``<!-- not runnable: REASON -->`` says why a block is not; every shell block carries one of
the two. A ``<!-- output -->`` block after a runnable one must appear in its output. The rules are in
docs/development.md, "Runnable docs". Every relative link in those files must point to a file and heading
that exist.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MINILM, REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
MARK = re.compile(r"^<!--\s*(runnable|not runnable|output)\s*(?::\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^( *)(`{3,})\s*([\w+-]*)\s*$")  # indented too (a fence in a list item)
BLOCK_TIMEOUT = 180


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    mark: str | None  # "runnable", "not runnable", "output" or None
    options: str = ""
    output: str | None = None  # the <!-- output --> block that follows a runnable one

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def option(self, name: str) -> bool:
        return name in [o.strip().split(" ")[0] for o in self.options.split(",")]

    def waits_for(self) -> str | None:
        m = re.search(r'waits for "([^"]+)"', self.options)
        return m.group(1) if m else None


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the marker comment on the line before it (blank
    lines allowed between); an output block is attached to the runnable block before it."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks), None)
        assert end is not None, f"{page.relative_to(REPO)}:{i + 1}: unclosed fence"
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(prev)
        block = Block(
            page,
            i + 1,
            lang,
            "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n",
            mark and mark.group(1),
            (mark and mark.group(2)) or "",
        )
        if block.mark == "output":
            assert found and found[-1].mark == "runnable", f"{block.where}: an output block follows a runnable one"
            found[-1].output = block.text
        found.append(block)
        i = end + 1
    return found


ALL = {page: blocks(page) for page in PAGES}
SETUP = [b for bs in ALL.values() for b in bs if b.mark == "runnable" and b.option("setup")]


def test_every_shell_block_says_whether_it_runs() -> None:
    unmarked = [
        b.where for bs in ALL.values() for b in bs if b.lang in SHELL and b.mark not in ("runnable", "not runnable")
    ]
    assert not unmarked, f"shell blocks without <!-- runnable --> or <!-- not runnable: REASON -->: {unmarked}"
    no_reason = [b.where for bs in ALL.values() for b in bs if b.mark == "not runnable" and not b.options]
    assert not no_reason, f"<!-- not runnable --> needs a reason: {no_reason}"
    assert len(SETUP) == 1 and SETUP[0].page.name == "README.md", "one setup block, in the README"


# -- output matching ----------------------------------------------------------------------------------


def output_pattern(shown: str) -> re.Pattern[str]:
    """Shown output as a regex: consecutive lines; ``…`` is any text within a line, a line of ``…`` alone
    any number of lines. Trailing spaces are ignored."""
    parts = []
    for line in shown.rstrip("\n").split("\n"):
        line = line.rstrip()
        if line == "…":
            parts.append("(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("…")) + "[ \t]*\n")
    return re.compile("^" + "".join(parts), re.MULTILINE)


@pytest.mark.parametrize(
    ("shown", "actual", "matches"),
    [
        ("a\nb\n", "x\na\nb\ny\n", True),
        ("a\nb\n", "a\nx\nb\n", False),
        ("a\n…\nb\n", "a\nx\ny\nb\n", True),
        ("a … s\n", "a 0.06 s\n", True),
        ("a … s\n", "b 0.06 s\n", False),
        ("1.000\n", "1x000\n", False),
    ],
)
def test_output_pattern(shown: str, actual: str, matches: bool) -> None:
    assert bool(output_pattern(shown).search(actual)) is matches


# -- running a page -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PageRun:
    """One page's environment: a temporary home, the README's set-up, servers started by the page."""

    root: Path
    port: int = field(default_factory=free_port)
    servers: list[tuple[Block, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.home.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MDMEMORY_", "OPENAI_", "MEMORY_API"))}
        bin_dir = str(Path(sys.executable).parent)
        env.update(
            HOME=str(self.home),
            MDMEMORY_HOME=str(self.home / ".mdmemory"),
            MDMEMORY_WORKSPACE=str(self.home / "notes"),
            PATH=bin_dir + os.pathsep + env.get("PATH", ""),
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
            HF_HUB_OFFLINE="1",
        )
        if os.environ.get("MDMEMORY_PROBE_CACHE"):  # the session's crash-probe cache (tests/conftest.py)
            env["MDMEMORY_PROBE_CACHE"] = os.environ["MDMEMORY_PROBE_CACHE"]
        self.env = env

    def text(self, s: str) -> str:
        return s.replace("8080", str(self.port))

    def run(self, block: Block) -> None:
        if block.option("model"):
            if not MINILM.exists() or importlib.util.find_spec("llama_cpp") is None:
                self.skipped.append(f"{block.where} (no MiniLM GGUF or llama-cpp-python)")
                return
            (self.home / "models").mkdir(exist_ok=True)
            link = self.home / "models" / MINILM.name
            if not link.exists():
                link.symlink_to(MINILM)
        if block.option("mcp-config"):
            self.mcp(block)
            return
        if block.waits_for():
            self.start(block)
            return
        argv = [sys.executable, "-c", self.text(block.text)] if block.lang == "python" else None
        argv = argv or ["bash", "-e", "-o", "pipefail", "-c", self.text(block.text)]
        done = subprocess.run(
            argv, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT
        )
        out = done.stdout.decode("utf-8", "replace")
        out += "" if out.endswith("\n") else "\n"  # curl's answer ends without one
        assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{block.text}\n--- output:\n{out}"
        if block.output is not None:
            assert output_pattern(self.text(block.output)).search(out), (
                f"{block.where}: the output the docs show is not what the block printed\n--- shown:\n"
                f"{block.output}--- printed:\n{out}"
            )

    def start(self, block: Block) -> None:
        log = self.root / f"server-{len(self.servers)}.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", "exec " + self.text(block.text).strip()],
                cwd=REPO,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.servers.append((block, proc, log))
        wanted, deadline = block.waits_for() or "", time.monotonic() + BLOCK_TIMEOUT
        while wanted not in log.read_text(encoding="utf-8", errors="replace"):
            assert proc.poll() is None, f"{block.where} exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{block.where}: no {wanted!r} in {BLOCK_TIMEOUT} s:\n{log.read_text()}"
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to each server started by the page: each must exit 0."""
        failures = []
        for block, proc, log in self.servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
            if code != 0:
                failures.append(f"{block.where} exited {code} on SIGTERM:\n{log.read_text()}")
        self.servers.clear()
        assert not failures, "\n".join(failures)

    def mcp(self, block: Block) -> None:
        """Start each server of an MCP client configuration with the MCP SDK, list its tools, search."""
        if importlib.util.find_spec("mcp") is None:
            self.skipped.append(f"{block.where} (the mcp extra is not installed)")
            return
        import anyio
        from mcp import StdioServerParameters

        servers = json.loads(block.text)["mcpServers"]
        assert servers, f"{block.where}: no server"
        for name, spec in servers.items():
            command = shutil.which(spec["command"], path=self.env["PATH"])
            assert command, f"{block.where}: {spec['command']!r} is not on PATH"
            params = StdioServerParameters(
                command=command, args=spec.get("args", []), env={**self.env, **spec.get("env", {})}, cwd=str(REPO)
            )
            tools, result = anyio.run(mcp_search, params, self.root / f"mcp-{name}.log")
            assert "memory_search" in tools, f"{block.where}: server {name}: tools {tools}"
            assert result.is_error is False and result.structured_content["results"], (
                f"{block.where}: server {name}: memory_search answered {result}"
            )


async def mcp_search(params: Any, log: Path) -> tuple[list[str], Any]:
    """Initialise a client session with the server ``params`` start, list its tools, call memory_search."""
    import anyio
    from mcp import ClientSession, stdio_client

    with anyio.fail_after(120), open(log, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                return tools, await session.call_tool("memory_search", {"query": "backups"})


RUNNABLE = [page for page in PAGES if any(b.mark == "runnable" for b in ALL[page])]


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(REPO)) for p in RUNNABLE])
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    run = PageRun(tmp_path)
    try:
        if page != SETUP[0].page:
            run.run(SETUP[0])
        for block in ALL[page]:
            if block.mark == "runnable":
                run.run(block)
    finally:
        run.stop()
    if run.skipped:
        warnings.warn(f"skipped: {', '.join(run.skipped)}", stacklevel=1)


def test_the_setup_block_makes_the_workspace_the_config_names(tmp_path: Path) -> None:
    """Without MDMEMORY_WORKSPACE, the README's set-up alone points mdmem at its copy of the template."""
    run = PageRun(tmp_path)
    run.run(SETUP[0])
    env = {k: v for k, v in run.env.items() if k != "MDMEMORY_WORKSPACE"}
    done = subprocess.run(
        [sys.executable, "-m", "mdmem", "--json", "status"], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout)["workspace"]) == run.home / "notes"
    assert (run.home / "notes" / "MEMORY.md").read_bytes() == (REPO / "workspace-template" / "MEMORY.md").read_bytes()


# -- links --------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(page: Path) -> str:
    """The page without fenced blocks and inline code (links there are examples, not links)."""
    text = re.sub(r"^( *)(`{3,})[^\n]*\n.*?^ *\2\s*$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (MkDocs' toc makes the same for the headings linked here)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "").strip().lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def test_slug() -> None:
    assert slug("Moving an index: `mdmem store migrate`") == "moving-an-index-mdmem-store-migrate"
    assert slug("Retrieval quality (LoCoMo)") == "retrieval-quality-locomo"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (also in ``make lint``): every page in the nav, every link and anchor found."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "performance" / "index.html").exists()
