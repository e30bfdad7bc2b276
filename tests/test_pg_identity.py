"""One PostgreSQL, one agent id, two workspaces: the second is refused, naming both; replicas of one
workspace are not. Real `mdmem` processes with two homes (state folders) and a real PostgreSQL.

Each "host" here has its own ``MDMEMORY_HOME``, workspace and configuration file; what the store sees of a
host is its workspace's id (``.mdmemory/workspace-id``), host name and real path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from mdmem.store.workspaceid import ID_DIR, ID_FILE
from mdmem.util.errors import StoreError, WorkspaceError
from tests.conftest import REPO, write


@pytest.fixture
def store(pg_url: str) -> Iterator[dict[str, Any]]:
    schema = "i_" + uuid.uuid4().hex[:12]
    yield {"backend": "postgres", "url": pg_url, "schema": schema}
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Host:
    """A machine's view: its state folder, its workspace for agent ``main`` and its config file."""

    def __init__(self, root: Path, name: str, store: dict[str, Any], workspace: Path | None = None) -> None:
        self.name = name
        self.home = root / f"home-{name}"
        self.workspace = workspace or root / f"ws-{name}"
        self.config = root / f"cfg-{name}.json5"
        ms = {"provider": "hash", "store": store}
        body = {"agents": {"defaults": {"workspace": str(self.workspace), "memorySearch": ms}}}
        self.config.write_text(json.dumps(body))

    def note(self, text: str, name: str = "MEMORY.md") -> None:
        write(self.workspace / name, f"# Memory\n\n{text}\n")

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, "PYTHONPATH": str(REPO), "MDMEMORY_HOME": str(self.home), **(env or {})}
        cmd = [sys.executable, "-m", "mdmem", *args, "--config", str(self.config), "--json"]
        return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=120, cwd=REPO)

    def ok(self, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        proc = self.run(*args, env=env)
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def texts(self, query: str) -> str:
        return " ".join(r["snippet"] for r in self.ok("search", query)["results"])


def indexed_paths(store: dict[str, Any]) -> set[str]:
    import psycopg

    with psycopg.connect(store["url"]) as conn:
        rows = conn.execute(
            f"SELECT f.path FROM {store['schema']}.files f JOIN {store['schema']}.generations g "
            "ON g.agent_id = f.agent_id AND g.gen = f.gen WHERE f.agent_id = 'main' AND g.state = 'live'"
        ).fetchall()
    return {r[0] for r in rows}


def test_a_second_workspace_under_the_same_agent_id_is_refused_naming_both(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    a, b = Host(tmp_path, "a", store), Host(tmp_path, "b", store)
    a.note("The alpha vault combination is 31-17-05.", "memory/alpha.md")
    a.note("Alpha keeps its notes here.")
    b.note("The beta deploy key rotates on Fridays.", "memory/beta.md")
    assert a.ok("index")["indexed"] == 2
    assert "31-17-05" in a.texts("vault combination")

    for args in (("index",), ("search", "vault combination"), ("pack", "vault combination"), ("index", "--force")):
        refused = b.run(*args)
        assert refused.returncode == 1, (args, refused.stdout, refused.stderr)
        assert "31-17-05" not in refused.stdout + refused.stderr  # nothing of A's notes
        said = refused.stderr
        assert f"workspace {a.workspace} on host" in said and f"workspace {b.workspace} on host" in said, said
        assert "agent 'main' in PostgreSQL schema" in said and "mdmem index --take-over" in said, said
    status = b.ok("status")
    assert status["storeState"]["state"] != "ok" and "take-over" in json.dumps(status["storeState"])
    assert indexed_paths(store) == {"MEMORY.md", "memory/alpha.md"}  # B wrote nothing
    assert "31-17-05" in a.texts("vault combination")  # A goes on as before
    a.note("The alpha vault moved to room 4.", "memory/alpha2.md")
    assert a.ok("index")["indexed"] == 1


def test_replicas_of_one_workspace_are_not_refused(tmp_path: Path, store: dict[str, Any]) -> None:
    """The same workspace at another path (its copy carries its id, as a shared volume mounted elsewhere
    would), and a replica without the agent's files, answer from the one index."""
    a = Host(tmp_path, "a", store)
    a.note("The gamma relay sits in rack 12.")
    a.ok("index")
    assert (a.workspace / ID_DIR / ID_FILE).read_text().strip() in json.dumps(claims(store))
    assert (a.workspace / ID_DIR / ".gitignore").read_text().endswith("*\n")  # a git clone is another workspace
    mounted = tmp_path / "mnt" / "elsewhere"
    shutil.copytree(a.workspace, mounted)
    b = Host(tmp_path, "b", store, workspace=mounted)
    assert b.ok("index")["unchanged"] == 1 and "rack 12" in b.texts("gamma relay")
    b.note("The gamma relay moved to rack 14.")  # (a shared volume has one file; a copy's A would sync back)
    assert b.ok("index")["indexed"] == 1
    c = Host(tmp_path, "c", store, workspace=tmp_path / "never-created")
    remote = c.ok("search", "gamma relay", env={"MDMEMORY_REMOTE_AGENTS": "*"})
    assert "rack 14" in remote["results"][0]["snippet"]
    assert not (tmp_path / "never-created").exists()
    assert [c["path"] for c in claims(store)] == [os.path.realpath(a.workspace)]  # one claim: the first's


def claims(store: dict[str, Any]) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(store["url"]) as conn:
        rows = conn.execute(f"SELECT agent_id, workspace_id, host, path FROM {store['schema']}.workspaces").fetchall()
    return [{"agent": r[0], "id": r[1], "host": r[2], "path": r[3]} for r in rows]


def test_take_over_makes_the_second_workspace_the_agents_and_refuses_the_first(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    a, b = Host(tmp_path, "a", store), Host(tmp_path, "b", store)
    a.note("The alpha vault combination is 31-17-05.", "memory/alpha.md")
    b.note("The beta deploy key rotates on Fridays.")  # no memory/ folder: A's memory/ rows must go anyway
    a.ok("index")
    report = b.ok("index", "--take-over")
    assert report["rebuilt"] and report["tookOver"]["path"] == str(a.workspace)
    assert indexed_paths(store) == {"MEMORY.md"}
    assert "Fridays" in b.texts("deploy key") and not b.ok("search", "vault combination")["results"]
    refused = a.run("search", "deploy key")
    assert refused.returncode == 1 and "Fridays" not in refused.stdout
    assert f"workspace {b.workspace} on host" in refused.stderr and f"workspace {a.workspace} on host" in refused.stderr
    assert a.run("index").returncode == 1 and indexed_paths(store) == {"MEMORY.md"}
    again = b.ok("index", "--take-over")  # its own already: nothing was taken from anyone
    assert again["tookOver"] is None


def memory(tmp_path: Path, name: str, store: dict[str, Any], workspace: Path) -> Memory:
    cfg = tmp_path / f"cfg-{name}.json5"
    ms = {"provider": "hash", "store": store}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    config = load_config(cfg)
    return Memory(config.agent(), config, choice=ProviderChoice(HashEmbeddingProvider(dims=64), "hash"))


def test_a_running_process_is_refused_from_the_take_over_on(tmp_path: Path, store: dict[str, Any]) -> None:
    """A long-lived process of the first workspace (a watch, a serve) checks at each search and write."""
    ws_a, ws_b = tmp_path / "ws-a", tmp_path / "ws-b"
    write(ws_a / "MEMORY.md", "# A\n\nThe alpha vault combination is 31-17-05.\n")
    write(ws_b / "MEMORY.md", "# B\n\nThe beta deploy key rotates on Fridays.\n")
    with memory(tmp_path, "a", store, ws_a) as a, memory(tmp_path, "b", store, ws_b) as b:
        a.sync()
        assert a.search("vault combination")["results"]
        with pytest.raises(StoreError, match="take-over") as refused:
            b.search("vault combination")
        assert refused.value.kind == "conflict"
        b.take_over()
        with pytest.raises(StoreError, match="take-over"):
            a.search("deploy key")
        with pytest.raises(StoreError, match="take-over"):
            a.sync()
        assert [r["path"] for r in b.search("deploy key")["results"]] == ["MEMORY.md"]


def test_an_id_file_that_is_not_mdmemorys_is_an_error_naming_it(tmp_path: Path, store: dict[str, Any]) -> None:
    """Writing needs the id: a damaged one is an error naming the file and the fix. Searching on the host
    and path that claimed the index goes on meanwhile."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# A\n\nThe heron nests by the lake.\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / ID_DIR).symlink_to(outside)
    with memory(tmp_path, "a", store, ws) as mem:
        with pytest.raises(WorkspaceError, match=f"{ws / ID_DIR} is not a folder.*Fix: remove it"):
            mem.sync()
        assert not list(outside.iterdir())  # nothing written through the link
        assert claims(store) == []
        (ws / ID_DIR).unlink()
        assert mem.sync()["indexed"] == 1  # a new id, and the index claimed for it
    (ws / ID_DIR / ID_FILE).write_text("not an id\n")
    write(ws / "MEMORY.md", "# A\n\nThe heron nests by the pond.\n")
    with memory(tmp_path, "a", store, ws) as mem:
        found = mem.search("heron nests")
        assert "lake" in found["results"][0]["snippet"]  # answered from the index, by host and path
        assert any(f"{ws / ID_DIR / ID_FILE} does not hold a workspace id" in w for w in found["warnings"])
        with pytest.raises(WorkspaceError, match=f"{ws / ID_DIR / ID_FILE} does not hold a workspace id"):
            mem.sync()
    with memory(tmp_path, "b", store, tmp_path / "ws-b") as other:
        (tmp_path / "ws-b").mkdir()
        with pytest.raises(StoreError, match="take-over"):  # another path is still another workspace
            other.search("heron nests")


def test_an_id_folder_removed_by_git_clean_is_refused_with_the_id_to_put_back(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    """`git clean -xdf` in a workspace kept in git deletes `.mdmemory/` (it ignores itself, so that clones do
    not share it); the next process makes a new id for the same folder. It is refused (another machine with
    the same host name may have another workspace at this path), and the error gives the old id to put back;
    put back, the index and searches work again with nothing rebuilt."""
    a = Host(tmp_path, "a", store)
    a.note("The zebra crossing is painted every spring.")
    a.ok("index")
    old = (a.workspace / ID_DIR / ID_FILE).read_text().strip()
    git = ["git", "-C", str(a.workspace), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(a.workspace)], check=True)
    subprocess.run([*git, "add", "MEMORY.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "notes"], check=True)
    subprocess.run([*git, "clean", "-xdfq"], check=True)
    assert not (a.workspace / ID_DIR).exists() and (a.workspace / "MEMORY.md").exists()

    refused = a.run("index")
    assert refused.returncode != 0
    error = refused.stderr
    new = (a.workspace / ID_DIR / ID_FILE).read_text().strip()
    assert "same folder" in error and old in error and new in error, error
    assert f"echo {old} > {a.workspace / ID_DIR / ID_FILE}" in error, error

    (a.workspace / ID_DIR / ID_FILE).write_text(old + "\n")  # the fix the error gives
    assert a.ok("index")["indexed"] == 0
    assert "zebra crossing" in a.texts("zebra crossing")
