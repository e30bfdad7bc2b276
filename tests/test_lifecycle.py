"""The memory lifecycle (docs/lifecycle.md) on real files and both stores: plan (a dry run), apply, revive by
hand and by use; pinned files and MEMORY.md never move; the archive is left out of search and packs unless
asked for; receipts hold counts only; a file edited after the plan is not moved; a process killed with SIGKILL
between moves leaves every file moved or not, never lost or doubled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path

import pytest

from mdmem.config.settings import TierConfig
from mdmem.engine.archiving import receipts_file
from mdmem.files.archive import Seen, apply_moves, archived_path, is_pinned, live_path, plan_moves
from mdmem.memory import Memory
from mdmem.util.errors import ConfigError
from tests.agent_helpers import run_cli, write_config
from tests.conftest import both_backends, write

OLD = ["memory/2024-01-05.md", "memory/2024-03-10.md", "memory/2025-02-01.md"]


def workspace_with_history(workspace: Path) -> dict[str, str]:
    texts = {
        "MEMORY.md": "# Facts\n\n- the boiler code is 4417\n",
        OLD[0]: "# 2024-01-05\n\n- heron seen at the lake\n",
        OLD[1]: "# 2024-03-10\n\n- lunch with Bob about trains\n",
        OLD[2]: "# 2025-02-01\n\n- booked the ferry to Murano\n",
        "memory/2024-06-01.md": "---\npinned: true\n---\n# 2024-06-01\n\n- wedding anniversary: June 1st\n",
        "memory/2024-07-01.md": "# 2024-07-01\n\n<!-- pin -->\n- passport renewal number 88-12\n",
        "memory/people/bob.md": "# Bob\n\n- glassblower in Murano\n",
        f"memory/{date.today():%Y-%m-%d}.md": "# today\n\n- a heron again\n",
    }
    for rel, text in texts.items():
        write(workspace / rel, text)
    return texts


def tree(workspace: Path) -> dict[str, str]:
    """Every memory file and its text."""
    return {
        p.relative_to(workspace).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(workspace.rglob("*.md"))
        if p.is_file()
    }


@both_backends
def test_plan_apply_search_and_revive(make_memory: Callable[..., Memory], workspace: Path) -> None:
    texts = workspace_with_history(workspace)
    mem = make_memory(provider="none")
    mem.sync()
    assert mem.get(OLD[1])["text"]  # read recently: held as used
    plan = mem.lifecycle("plan")
    assert [(m["path"], m["to"], m["reason"]) for m in plan["moves"]] == [
        (OLD[0], "memory/archive/2024/2024-01-05.md", "age-unused"),
        (OLD[2], "memory/archive/2025/2025-02-01.md", "age-unused"),
    ]
    held = {h["path"]: h["reason"] for h in plan["held"]}
    assert held == {
        "MEMORY.md": "root",
        OLD[1]: "used",
        "memory/2024-06-01.md": "pinned",
        "memory/2024-07-01.md": "pinned",
        "memory/people/bob.md": "no-tier",
        f"memory/{date.today():%Y-%m-%d}.md": "young",
    }
    assert tree(workspace) == texts  # a plan moves nothing
    done = mem.lifecycle("apply")
    assert [m["path"] for m in done["moved"]] == [OLD[0], OLD[2]] and done["skipped"] == []
    after = tree(workspace)
    assert after["memory/archive/2024/2024-01-05.md"] == texts[OLD[0]] and OLD[0] not in after
    assert len(after) == len(texts)
    # left out of search and packs by default, found on request
    assert [r["path"] for r in mem.search("heron")["results"]] == [f"memory/{date.today():%Y-%m-%d}.md"]
    found = {r["path"] for r in mem.search("heron", include_archive=True)["results"]}
    assert "memory/archive/2024/2024-01-05.md" in found
    assert mem.pack("ferry Murano")["items"] == [] or all(
        not i["path"].startswith("memory/archive/") for i in mem.pack("ferry Murano")["items"]
    )
    packed = [i["path"] for i in mem.pack("ferry", include_archive=True)["items"]]
    assert packed == ["memory/archive/2025/2025-02-01.md"]
    tool = mem.call_tool("memory_search", {"query": "heron", "includeArchive": True})
    assert "memory/archive/2024/2024-01-05.md" in {r["path"] for r in tool["results"]}
    # a receipt per run: counts, no paths, no text
    line = receipts_file(mem.agent).read_text().splitlines()[-1]
    receipt = json.loads(line)
    assert receipt["archived"] == {"daily": {"age-unused": 2}} and receipt["action"] == "apply"
    assert receipt["held"] == {"root": 1, "used": 1, "pinned": 2, "no-tier": 1, "young": 1}
    assert "memory" not in line and "heron" not in line
    assert mem.status()["lifecycle"]["runs"] == 1
    # the archived log packed on request was used: the next apply brings it back (lifecycle.reviveOnUse)
    assert [(m["to"], m["reason"]) for m in mem.lifecycle("apply")["moved"]] == [(OLD[2], "use")]
    assert mem.lifecycle("apply")["moved"] == []
    # revive by the live name brings a file back by hand
    back = mem.lifecycle("revive", OLD[0])
    assert [(m["path"], m["to"], m["reason"]) for m in back["moved"]] == [
        ("memory/archive/2024/2024-01-05.md", OLD[0], "asked")
    ]
    assert tree(workspace)[OLD[0]] == texts[OLD[0]]
    # a person asked for it back: that counts as a read, so the next apply keeps it rather than archiving it
    assert {h["path"]: h["reason"] for h in mem.lifecycle("plan")["held"]}[OLD[0]] == "used"
    assert mem.lifecycle("apply")["moved"] == []
    assert "memory/2024-01-05.md" in {r["path"] for r in mem.search("heron")["results"]}
    with pytest.raises(ConfigError, match="not an archived memory file"):
        mem.lifecycle("revive", "memory/people/bob.md")


@both_backends
def test_an_archived_file_read_or_packed_comes_back_at_the_next_apply(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    texts = workspace_with_history(workspace)
    mem = make_memory(provider="none")
    mem.lifecycle("apply")
    archived = "memory/archive/2025/2025-02-01.md"
    assert mem.get(archived)["text"] == texts[OLD[2]]  # reading it moves nothing by itself
    assert archived in tree(workspace)
    plan = mem.lifecycle("plan")
    assert [(m["path"], m["to"], m["reason"]) for m in plan["moves"]] == [(archived, OLD[2], "use")]
    done = mem.lifecycle("apply")
    assert done["receipt"]["revived"] == {"use": 1}
    assert tree(workspace)[OLD[2]] == texts[OLD[2]]
    # its uses came back with it: it is held as used now, not archived again
    assert {h["path"]: h["reason"] for h in mem.lifecycle("plan")["held"]}[OLD[2]] == "used"


def test_pinned_and_root_files_never_move_whatever_the_tiers(tmp_path: Path, workspace: Path) -> None:
    texts = workspace_with_history(workspace)
    write(workspace / "memory/notes/old.md", "# notes\n<!--   PINNED -->\n")
    texts["memory/notes/old.md"] = "# notes\n<!--   PINNED -->\n"
    tiers = [{"name": "all", "paths": ["*"], "olderThanDays": 0, "unusedDays": 0}]
    ms = {"provider": "none", "lifecycle": {"tiers": tiers}}
    with Memory.open(config_path=write_config(tmp_path / "c.json5", workspace, {"memorySearch": ms})) as mem:
        moved = {m["path"] for m in mem.lifecycle("apply")["moved"]}
    pinned = {"MEMORY.md", "memory/2024-06-01.md", "memory/2024-07-01.md", "memory/notes/old.md"}
    assert moved == set(texts) - pinned
    assert pinned <= set(tree(workspace))


def test_pins_and_paths() -> None:
    assert is_pinned("---\ntitle: x\npinned: true\n---\nbody")
    assert is_pinned("body\n  <!-- pin -->  \n")
    assert not is_pinned("---\ntitle: x\n---\npinned: true\n")  # not in the front matter
    assert not is_pinned("text <!-- pin --> inline")
    assert archived_path("memory/2024-01-05-standup.md", 0) == "memory/archive/2024/2024-01-05-standup.md"
    assert archived_path("memory/people/bob.md", 1_700_000_000) == "memory/archive/2023/people/bob.md"
    assert live_path("memory/archive/2023/people/bob.md") == "memory/people/bob.md"
    assert live_path("memory/archive/notes.md") is None


def test_tiers_first_match_keep_and_ages() -> None:
    now = time.time()
    day = 86_400
    seen = [
        Seen(f"memory/{date.fromtimestamp(now - 40 * day):%Y-%m-%d}.md", now, 1, "d"),
        Seen("memory/projects/a.md", now - 400 * day, 1, "d", last_used_at=now - 10 * day),
        Seen("memory/projects/b.md", now - 400 * day, 1, "d", last_used_at=now - 100 * day),
        Seen("memory/projects/keep/c.md", now - 400 * day, 1, "d"),
    ]
    tiers = [
        TierConfig("kept", ("memory/projects/keep/*",), action="keep"),
        TierConfig("projects", ("memory/projects/*",), older_than_days=365, unused_days=30),
        TierConfig("daily", ("memory/????-??-??.md",), older_than_days=30, unused_days=0),
    ]
    moves, held = plan_moves(seen, tiers, date.fromtimestamp(now), now)
    assert [(m.path, m.tier, m.reason) for m in moves] == [
        (f"memory/{date.fromtimestamp(now - 40 * day):%Y-%m-%d}.md", "daily", "age"),
        ("memory/projects/b.md", "projects", "age-unused"),
    ]
    assert {(h.path, h.reason) for h in held} == {
        ("memory/projects/a.md", "used"),
        ("memory/projects/keep/c.md", "keep"),
    }


def test_a_file_edited_after_the_plan_is_not_moved(make_memory: Callable[..., Memory], workspace: Path) -> None:
    workspace_with_history(workspace)
    mem = make_memory(provider="none")
    from mdmem.engine.archiving import seen_files

    moves, _ = plan_moves(seen_files(mem.workspace, None), mem.settings.lifecycle.tiers, date.today(), time.time())
    assert [m.path for m in moves] == [OLD[0], OLD[1], OLD[2]]
    with open(workspace / OLD[1], "a", encoding="utf-8") as fh:  # an agent appends meanwhile
        fh.write("- a late line\n")
    write(workspace / "memory/archive/2025/2025-02-01.md", "# someone put a file here\n")
    done, skipped = apply_moves(workspace, moves)
    assert [m.path for m in done] == [OLD[0]]
    assert [(m.path, why) for m, why in skipped] == [(OLD[1], "edited"), (OLD[2], "target-exists")]
    assert (workspace / OLD[1]).read_text().endswith("- a late line\n")
    assert (workspace / OLD[2]).exists()


def test_a_symlinked_archive_folder_is_refused(tmp_path: Path, workspace: Path) -> None:
    workspace_with_history(workspace)
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "memory/archive").symlink_to(outside)
    cfg = write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}})
    with Memory.open(config_path=cfg) as mem:
        done = mem.lifecycle("apply")
    assert done["moved"] == [] and {s["why"].split(":")[0] for s in done["skipped"]} == {"error"}
    assert list(outside.iterdir()) == [] and all((workspace / p).exists() for p in OLD)


KILLED = """
import sys, time
from pathlib import Path
from mdmem.memory import Memory
from mdmem.engine import archiving
from mdmem.files.archive import plan_moves

mem = Memory.open(config_path=sys.argv[1])
seen = archiving.seen_files(mem.workspace, None)
moves, held = plan_moves(seen, mem.settings.lifecycle.tiers, archiving.today(mem.agent), time.time())
def moved(m):
    print("moved", m.path, flush=True)
    time.sleep(60)  # killed here, between two moves
archiving.apply_plan(mem.agent, mem.workspace, moves, held, lambda: mem.store, moved=moved)
"""


def test_killed_between_moves_loses_and_doubles_nothing(tmp_path: Path, workspace: Path) -> None:
    texts = workspace_with_history(workspace)
    cfg = write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}})
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(cfg)], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("moved memory/2024-01-05.md"), line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    after = tree(workspace)
    assert sorted(after.values()) == sorted(texts.values())  # every file once, whole
    assert "memory/archive/2024/2024-01-05.md" in after and OLD[1] in after
    assert not receipts_file(Memory.open(config_path=cfg).agent).exists()  # the killed run wrote none
    assert run_cli(["lifecycle", "apply", "--config", str(cfg), "--json"]) == 0  # the next run finishes
    final = tree(workspace)
    assert sorted(final.values()) == sorted(texts.values())
    assert {"memory/archive/2024/2024-03-10.md", "memory/archive/2025/2025-02-01.md"} <= set(final)


def test_lifecycle_commands(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workspace_with_history(workspace)
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}}))
    assert run_cli(["lifecycle", "plan", "--config", cfg]) == 0
    text = capsys.readouterr().out
    assert "would move 3 file(s):" in text and "memory/2024-01-05.md → memory/archive/2024/2024-01-05.md" in text
    assert "held: 1 no-tier, 2 pinned, 1 root, 1 young" in text
    assert run_cli(["lifecycle", "apply", "--config", cfg]) == 0
    assert "moved 3 file(s):" in capsys.readouterr().out
    assert run_cli(["search", "--config", cfg, "--json", "ferry"]) == 0
    empty = json.loads(capsys.readouterr().out)
    assert empty["results"] == []
    assert "1 archived chunk(s) match: search again with includeArchive" in " ".join(empty["warnings"])
    assert run_cli(["search", "--config", cfg, "--json", "--include-archive", "ferry"]) == 0
    assert [r["path"] for r in json.loads(capsys.readouterr().out)["results"]] == ["memory/archive/2025/2025-02-01.md"]
    assert run_cli(["pack", "--config", cfg, "--json", "--include-archive", "ferry"]) == 0
    assert json.loads(capsys.readouterr().out)["items"][0]["path"] == "memory/archive/2025/2025-02-01.md"
    assert run_cli(["status", "--config", cfg]) == 0
    assert "lifecycle   1 run(s); last apply: 3 archived, 0 revived, 0 skipped" in capsys.readouterr().out
    assert run_cli(["lifecycle", "revive", "--config", cfg, "memory/archive/2025/2025-02-01.md"]) == 0
    assert "memory/archive/2025/2025-02-01.md → memory/2025-02-01.md" in capsys.readouterr().out
    assert run_cli(["lifecycle", "revive", "--config", cfg, "memory/2099-01-01.md"]) == 2
    assert "not an archived memory file" in capsys.readouterr().err


def test_watch_applies_on_schedule_once_per_period(tmp_path: Path, workspace: Path) -> None:
    from tests.daemon_helpers import Daemon

    workspace_with_history(workspace)
    ms = {"provider": "none", "lifecycle": {"schedule": "daily"}}
    cfg = write_config(tmp_path / "c.json5", workspace, {"memorySearch": ms})
    daemon = Daemon(cfg)
    try:
        event = daemon.wait_for(lambda e: e["event"] == "lifecycle", timeout=60)
        assert event == {**event, "agent": "main", "archived": 3, "revived": 0, "skipped": 0}
    finally:
        assert daemon.stop() == 0
    assert {"memory/archive/2024/2024-01-05.md", "memory/archive/2025/2025-02-01.md"} <= set(tree(workspace))
    again = Daemon(cfg)  # the day has not passed: the next daemon does not apply again
    try:
        again.wait_for(lambda e: e["event"] == "watching", timeout=60)
        time.sleep(3)  # more than a heartbeat
    finally:
        assert again.stop() == 0
    assert [e for e in again.log if e["event"] == "lifecycle"] == []
    with Memory.open(config_path=cfg) as mem:
        assert mem.status()["lifecycle"]["runs"] == 1


def test_no_schedule_no_moves(tmp_path: Path, workspace: Path) -> None:
    from tests.daemon_helpers import Daemon

    texts = workspace_with_history(workspace)
    cfg = write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}})
    daemon = Daemon(cfg)
    try:
        daemon.wait_for(lambda e: e["event"] == "sync", timeout=60)
        time.sleep(3)
    finally:
        assert daemon.stop() == 0
    assert tree(workspace) == texts and not [e for e in daemon.log if e["event"] == "lifecycle"]


def test_a_link_into_the_archive_brings_it_only_on_request(make_memory: Callable[..., Memory], workspace: Path) -> None:
    workspace_with_history(workspace)
    write(workspace / "memory/people/bob.md", "# Bob\n\n- glassblower in Murano, met him [[2025-02-01]]\n")
    mem = make_memory(provider="none")
    mem.lifecycle("apply")
    plain = [r["path"] for r in mem.search("glassblower", neighbors=1)["results"]]
    assert plain == ["memory/people/bob.md"]
    both = [r["path"] for r in mem.search("glassblower", neighbors=1, include_archive=True)["results"]]
    assert both == ["memory/people/bob.md", "memory/archive/2025/2025-02-01.md"]
    packed = [i["path"] for i in mem.pack("glassblower", budget_tokens=300, neighbors=1)["items"]]
    assert packed == ["memory/people/bob.md"]


def test_a_token_in_a_file_name_never_shows_in_plans_receipts_usage_or_status(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    token = "gh" + "p_" + "Zq8Wm3Kx7Lp2Vn9Rt4Bc6Yd1Hf5Js0Ga2" + "E"
    name = f"memory/notes/deploy-{token}.md"
    write(workspace / name, "# Deploy\n\n- walrus deploys on Fridays\n")
    os.utime(workspace / name, (time.time() - 400 * 86400,) * 2)  # old enough for the tier below
    tiers = [{"name": "notes", "paths": ["memory/notes/*"], "olderThanDays": 90, "unusedDays": 0}]
    mem = make_memory({"lifecycle": {"tiers": tiers}}, provider="none")
    mem.sync()
    mem.search("walrus Fridays")  # a use, so the file is in the usage report
    outputs = {
        "plan": mem.lifecycle("plan"),
        "usage": mem.usage(limit=5),
        "apply": mem.lifecycle("apply"),
        "status": mem.status(),
    }
    for label, value in outputs.items():
        text = json.dumps(value)
        assert token not in text and token[4:16] not in text, label
    assert "[REDACTED:github_token]" in json.dumps(outputs["apply"]["moved"])
    assert (workspace / "memory/archive").is_dir() and not (workspace / name).exists()  # the file itself moved
    assert token in next((workspace / "memory/archive").rglob("*.md")).name  # with its real name


@both_backends
def test_a_memory_clock_stamps_uses_and_is_the_lifecycle_now(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    """``Memory(clock=...)``: uses carry the clock's time and the plan counts ages and unused days from it (a
    simulation's years, benchmarks/ten_year.py); the real date (years before these logs) plays no part."""
    logs = {"memory/2031-01-10.md": "kayak trip", "memory/2031-01-12.md": "kayak repair", "memory/2031-05-20.md": "x"}
    for rel, text in logs.items():
        write(workspace / rel, f"# {rel}\n\n- {text}\n")
    now = [datetime(2031, 2, 1, 12).timestamp()]
    mem = make_memory(provider="none", clock=lambda: now[0])
    mem.sync()
    assert {r["path"] for r in mem.search("kayak trip")["results"]} == {"memory/2031-01-10.md"}
    now[0] = datetime(2031, 4, 20, 12).timestamp()
    assert mem.get("memory/2031-01-12.md")["text"]
    mem.usage()  # written now
    last = {r.path: r.last_used_at for r in mem.store.usage_rows()}
    assert last == {"memory/2031-01-10.md": datetime(2031, 2, 1, 12).timestamp(), "memory/2031-01-12.md": now[0]}
    now[0] = datetime(2031, 6, 1, 12).timestamp()  # 130 and 140 days old; unused 120 and 42 days
    plan = mem.lifecycle("plan")
    assert [(m["path"], m["reason"]) for m in plan["moves"]] == [("memory/2031-01-10.md", "age-unused")]
    held = {h["path"]: h["reason"] for h in plan["held"]}
    assert held == {"memory/2031-01-12.md": "used", "memory/2031-05-20.md": "young"}
