"""Pre-compaction memory flush: threshold, cycles, catch-up, read-only skip, prompts, reset, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.flush import (
    FlushDecision,
    SessionStore,
    check_flush,
    record_compaction,
    record_flush,
    reset_session,
    sessions_path,
    workspace_writable,
)
from mdmem.config.load import (
    AgentConfig,
    CompactionConfig,
    ConfigError,
    SessionContextConfig,
    load_config,
)
from mdmem.config.settings import DEFAULT_FLUSH_PROMPT, DEFAULT_FLUSH_SYSTEM_PROMPT
from mdmem.util.errors import StoreError
from tests.agent_helpers import agent_config, run_cli, write_config

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.json5"
WINDOW = 200_000
THRESHOLD = WINDOW - 20_000 - 4_000  # the defaults: reserveTokensFloor 20000, softThresholdTokens 4000
KEY = "agent:main:main"


@pytest.fixture
def agent(tmp_path: Path, workspace: Path) -> AgentConfig:
    return agent_config(tmp_path, workspace)


def check(agent: AgentConfig, tokens: int, key: str = KEY, **kw: Any) -> FlushDecision:
    return check_flush(agent, key, tokens, WINDOW, today="2026-03-09", **kw)


# -- the threshold and the cycle --------------------------------------------------------------------------


def test_threshold_boundary_one_token_below_and_at(agent: AgentConfig) -> None:
    below = check(agent, THRESHOLD - 1)
    assert below == FlushDecision(
        False, f"below-threshold: {THRESHOLD - 1} tokens < threshold {THRESHOLD}", None, None, THRESHOLD
    )
    at = check(agent, THRESHOLD)
    assert at == FlushDecision(
        True,
        f"threshold: {THRESHOLD} tokens >= threshold {THRESHOLD}",
        DEFAULT_FLUSH_SYSTEM_PROMPT,
        "Write any lasting notes to memory/2026-03-09.md; reply with NO_REPLY if nothing to store.",
        THRESHOLD,
    )
    assert at.to_dict() == {
        "due": True,
        "reason": at.reason,
        "systemPrompt": at.system_prompt,
        "prompt": at.prompt,
        "threshold": THRESHOLD,
    }


def test_threshold_follows_the_configuration(tmp_path: Path, workspace: Path) -> None:
    compaction = {"reserveTokensFloor": 1000, "memoryFlush": {"softThresholdTokens": 500}}
    agent = agent_config(tmp_path, workspace, compaction=compaction)
    assert not check_flush(agent, KEY, 8499, 10_000).due
    decision = check_flush(agent, KEY, 8500, 10_000)
    assert decision.due and decision.threshold == 8500


def test_one_flush_per_compaction_cycle(agent: AgentConfig) -> None:
    assert check(agent, THRESHOLD).due
    entry = record_flush(agent, KEY)
    assert entry["memoryFlushCompactionCount"] == entry["compactionCount"] == 0
    for tokens in (THRESHOLD, THRESHOLD + 1, WINDOW):
        later = check(agent, tokens)
        assert not later.due and later.reason.startswith("already-flushed"), later
    record_compaction(agent, KEY)
    assert not check(agent, THRESHOLD - 1).due  # the compaction shrank the session
    again = check(agent, THRESHOLD)
    assert again.due and again.reason.startswith("threshold"), again  # a new cycle, not a catch-up
    record_flush(agent, KEY)
    assert not check(agent, WINDOW).due


def test_catch_up_after_a_compaction_without_a_flush(agent: AgentConfig) -> None:
    # The session jumped from below the threshold straight into compaction: the flush never fired.
    assert not check(agent, THRESHOLD - 1000).due
    record_compaction(agent, KEY)
    assert not check(agent, 30_000).due  # compaction reset the token count
    late = check(agent, THRESHOLD)
    assert late.due and late.reason.startswith("catch-up: 1 compaction(s) happened without a flush"), late
    assert late.prompt and "NO_REPLY" in late.prompt
    record_flush(agent, KEY)
    assert check(agent, WINDOW).reason.startswith("already-flushed")


def test_catch_up_when_the_compaction_count_went_back(agent: AgentConfig) -> None:
    store = SessionStore(sessions_path(agent))
    store.update(KEY, lambda e: {"compactionCount": 0, "memoryFlushAt": 1, "memoryFlushCompactionCount": 3})
    decision = check(agent, THRESHOLD)
    assert decision.due and decision.reason.startswith("catch-up: the compaction count went back (3 -> 0)")


def test_sessions_are_independent(agent: AgentConfig) -> None:
    record_flush(agent, "agent:main:one")
    assert not check(agent, THRESHOLD, key="agent:main:one").due
    assert check(agent, THRESHOLD, key="agent:main:two").due


def test_disabled_and_tiny_windows_never_flush(tmp_path: Path, workspace: Path) -> None:
    off = agent_config(tmp_path, workspace, compaction={"memoryFlush": {"enabled": False}})
    assert check(off, WINDOW) == FlushDecision(
        False, "disabled: compaction.memoryFlush.enabled is false", None, None, THRESHOLD
    )
    on = agent_config(tmp_path, workspace)
    tiny = check_flush(on, KEY, 10, 24_000)
    assert not tiny.due and tiny.reason.startswith("window-too-small") and tiny.threshold == 0


@pytest.mark.parametrize("tokens, window", [(-1, WINDOW), (True, WINDOW), (1.5, WINDOW), (1, 0)])
def test_invalid_numbers_are_refused(agent: AgentConfig, tokens: Any, window: Any) -> None:
    with pytest.raises(ConfigError, match="whole number"):
        check_flush(agent, KEY, tokens, window)


def test_empty_session_key_is_refused(agent: AgentConfig) -> None:
    with pytest.raises(ConfigError, match="session key is empty"):
        check_flush(agent, " ", THRESHOLD, WINDOW)
    with pytest.raises(ConfigError):
        record_flush(agent, "")


# -- read-only workspaces --------------------------------------------------------------------------------


def test_read_only_flag_skips_the_flush(agent: AgentConfig) -> None:
    decision = check(agent, THRESHOLD, writable=False)
    assert not decision.due and decision.reason.startswith("read-only:") and decision.prompt is None
    assert check(agent, THRESHOLD, writable=True).due


def test_workspace_that_cannot_exist_is_not_writable(tmp_path: Path) -> None:
    """Independent of permissions and of root: the workspace's parent is a regular file."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    agent = agent_config(tmp_path, blocker / "ws")
    assert workspace_writable(agent.workspace) == (False, f"{blocker} is not a folder")
    decision = check(agent, THRESHOLD)
    assert not decision.due and decision.reason.startswith("read-only:") and "not a folder" in decision.reason


@pytest.fixture
def frozen_workspace(workspace: Path) -> Iterator[Path]:
    """``workspace`` made unwritable for real: chmod for a normal user, the immutable flag for root."""
    memory = workspace / "memory"
    if os.geteuid() != 0:
        memory.chmod(0o555)
        workspace.chmod(0o555)
        undo = [lambda: workspace.chmod(0o755), lambda: memory.chmod(0o755)]
    else:
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("running as root without chattr: cannot make a folder unwritable")
        done = subprocess.run([chattr, "+i", str(memory)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
        undo = [lambda: subprocess.run([chattr, "-i", str(memory)], check=True)]
    try:
        try:
            (memory / "probe.md").write_text("x")
        except OSError:
            pass
        else:
            pytest.skip("could not make the workspace read-only on this file system")
        yield workspace
    finally:
        for step in undo:
            step()


def test_really_read_only_workspace_skips_the_flush(tmp_path: Path, frozen_workspace: Path) -> None:
    agent = agent_config(tmp_path, frozen_workspace)
    ok, why = workspace_writable(agent.workspace)
    assert not ok and str(frozen_workspace / "memory") in why
    decision = check(agent, THRESHOLD)
    assert not decision.due and decision.reason.startswith("read-only:"), decision
    assert not list((frozen_workspace / "memory").iterdir())


def test_probe_leaves_nothing_behind(agent: AgentConfig, workspace: Path) -> None:
    assert workspace_writable(workspace) == (True, "")
    shutil.rmtree(workspace / "memory")
    assert workspace_writable(workspace) == (True, "")  # memory/ can still be created
    assert sorted(p.name for p in workspace.iterdir()) == []


# -- prompts ------------------------------------------------------------------------------------------------


def test_custom_prompt_without_no_reply_gets_it_appended(tmp_path: Path, workspace: Path) -> None:
    flush = {"systemPrompt": "Compaction soon (YYYY-MM-DD).", "prompt": "Save notes to memory/YYYY-MM-DD.md."}
    agent = agent_config(tmp_path, workspace, compaction={"memoryFlush": flush})
    decision = check(agent, THRESHOLD)
    assert decision.system_prompt == "Compaction soon (2026-03-09)."
    assert (
        decision.prompt == "Save notes to memory/2026-03-09.md.\n\nIf there is nothing to store, reply with NO_REPLY."
    )


def test_custom_prompt_with_no_reply_is_kept(tmp_path: Path, workspace: Path) -> None:
    flush = {"prompt": "Store what matters; answer NO_REPLY otherwise."}
    agent = agent_config(tmp_path, workspace, compaction={"memoryFlush": flush})
    assert check(agent, THRESHOLD).prompt == "Store what matters; answer NO_REPLY otherwise."


def test_prompt_date_is_today_in_the_user_time_zone(tmp_path: Path, workspace: Path) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    zone = "Pacific/Kiritimati"  # UTC+14: its date is rarely the machine's
    agent = agent_config(tmp_path, workspace, userTimezone=zone)
    decision = check_flush(agent, KEY, THRESHOLD, WINDOW)
    today = datetime.now(ZoneInfo(zone)).date().isoformat()
    assert decision.prompt == DEFAULT_FLUSH_PROMPT.replace("YYYY-MM-DD", today)


# -- recording, reset and the file ---------------------------------------------------------------------------


def test_reset_clears_the_fields_and_keeps_the_runtime_s_own(agent: AgentConfig) -> None:
    store = SessionStore(sessions_path(agent))
    store.update(KEY, lambda e: {"sessionId": "abc", "totalTokens": 5})
    record_compaction(agent, KEY)
    record_flush(agent, KEY)
    entry = store.entry(KEY)
    assert entry["sessionId"] == "abc" and entry["compactionCount"] == 1 and entry["memoryFlushCompactionCount"] == 1
    assert not check(agent, THRESHOLD).due
    result = reset_session(agent, KEY)
    assert result == {
        "sessionKey": KEY,
        "sessionId": "abc",
        "totalTokens": 5,
        "cleared": ["compactionCount", "memoryFlushAt", "memoryFlushCompactionCount"],
    }
    assert store.entry(KEY) == {"sessionId": "abc", "totalTokens": 5}
    decision = check(agent, THRESHOLD)
    assert decision.due and decision.reason.startswith("threshold")


def test_reset_of_a_session_with_only_our_fields_removes_it(agent: AgentConfig) -> None:
    record_flush(agent, KEY)
    assert reset_session(agent, KEY)["cleared"] == ["compactionCount", "memoryFlushAt", "memoryFlushCompactionCount"]
    assert SessionStore(sessions_path(agent)).read() == {}
    assert reset_session(agent, "unknown")["cleared"] == []


def test_file_location_and_atomic_writes(agent: AgentConfig, isolated_env: Path) -> None:
    path = sessions_path(agent)
    assert path == isolated_env / "state" / "sessions" / "main.json"
    record_flush(agent, KEY)
    record_compaction(agent, "other")
    data = json.loads(path.read_text())
    assert set(data) == {KEY, "other"} and data["other"] == {"compactionCount": 1}
    assert isinstance(data[KEY]["memoryFlushAt"], int)
    assert sorted(p.name for p in path.parent.iterdir()) == ["main.json", "main.json.lock"]  # no temp files


def test_corrupt_file_is_reported_with_a_fix(agent: AgentConfig) -> None:
    path = sessions_path(agent)
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    with pytest.raises(StoreError, match="not valid JSON.*Fix"):
        check(agent, THRESHOLD)
    with pytest.raises(StoreError):
        record_flush(agent, KEY)
    assert path.read_text() == "{ not json"  # never overwritten


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"agent:main:main": {"label": "caf\xe9", "compactionCount": 2}}', "is not UTF-8 (byte 0xe9 at offset 34)"),
        (b"\xff\xfe{\x00}\x00", "is not UTF-8 (byte 0xff at offset 0)"),  # UTF-16
        (b"[" * 100_000 + b"]" * 100_000, "is not valid JSON (nested too deeply)"),
    ],
)
def test_a_file_that_is_not_utf8_json_is_an_error_naming_it_and_left_alone(
    tmp_path: Path, workspace: Path, agent: AgentConfig, content: bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sessions_path(agent)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(StoreError, match="Fix: re-save it as UTF-8|Fix: repair it") as failed:
        check(agent, THRESHOLD)
    assert str(failed.value).startswith(f"{path} {said}")
    with pytest.raises(StoreError):
        record_compaction(agent, KEY)
    assert path.read_bytes() == content  # never rewritten
    cfg = str(write_config(tmp_path / "c.json5", workspace))
    capsys.readouterr()
    assert run_cli(["flush", "done", KEY, "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mdmem: error: {path} ") and "Traceback" not in err
    assert run_cli(["status", "--config", cfg, "--json"]) == 0  # everything else works as before
    assert run_cli(["context", "--config", cfg]) == 0


def test_a_fifo_or_a_folder_in_its_place_is_an_error_not_a_wait(agent: AgentConfig) -> None:
    path = sessions_path(agent)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(StoreError, match="is not a regular file.*Fix: remove it"):
        check(agent, THRESHOLD)  # a FIFO nobody writes to: answered at once
    path.unlink()
    path.mkdir()
    with pytest.raises(StoreError, match="is not a regular file|cannot read"):
        check(agent, THRESHOLD)


def test_entries_another_program_wrote_are_printed_as_they_are(
    tmp_path: Path, workspace: Path, agent: AgentConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sessions_path(agent)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({KEY: {"memoryFlushAt": "yesterday"}, "b": {"memoryFlushAt": 10**30}}))
    cfg = str(write_config(tmp_path / "c.json5", workspace))
    assert run_cli(["flush", "compacted", KEY, "--config", cfg]) == 0
    assert "last flush 'yesterday' (not epoch milliseconds) (in compaction cycle None)" in capsys.readouterr().out
    assert run_cli(["flush", "compacted", "b", "--config", cfg]) == 0
    assert "(not epoch milliseconds)" in capsys.readouterr().out


def _hammer(agent: AgentConfig, own_key: str, rounds: int, start: Any) -> None:
    start.wait()
    for _ in range(rounds):
        record_compaction(agent, "shared")
        record_flush(agent, own_key)


def _read_loop(agent: AgentConfig, start: Any, stop: Any, failures: Any) -> None:
    start.wait()
    path = sessions_path(agent)
    while not stop.is_set():
        try:
            json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except ValueError:
            failures.value += 1


def test_two_processes_recording_concurrently_lose_nothing(agent: AgentConfig) -> None:
    rounds = 150
    ctx = multiprocessing.get_context("spawn")
    start, stop, failures = ctx.Barrier(3), ctx.Event(), ctx.Value("i", 0)
    reader = ctx.Process(target=_read_loop, args=(agent, start, stop, failures))
    writers = [ctx.Process(target=_hammer, args=(agent, f"session-{i}", rounds, start)) for i in range(2)]
    for proc in [reader, *writers]:
        proc.start()
    for proc in writers:
        proc.join(120)
        assert proc.exitcode == 0
    stop.set()
    reader.join(30)
    data = json.loads(sessions_path(agent).read_text())
    assert data["shared"] == {"compactionCount": 2 * rounds}  # every read-modify-write kept
    for i in range(2):
        entry = data[f"session-{i}"]
        assert entry["compactionCount"] == entry["memoryFlushCompactionCount"] == 0
        assert isinstance(entry["memoryFlushAt"], int)
    assert failures.value == 0  # a reader never saw a half-written file


# -- command line ---------------------------------------------------------------------------------------------


def test_cli_flush_commands_speak_json(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(write_config(tmp_path / "c.json5", workspace))

    def run(*argv: str) -> tuple[int, dict[str, Any]]:
        code = run_cli(["flush", *argv, "--config", cfg, "--json"])
        return code, json.loads(capsys.readouterr().out)

    code, out = run("check", KEY, "--tokens", str(THRESHOLD - 1), "--context-window", str(WINDOW))
    assert code == 0 and out["due"] is False and out["threshold"] == THRESHOLD
    code, out = run(
        "check", KEY, "--total-tokens", str(THRESHOLD), "--context-window", str(WINDOW), "--today", "2026-03-09"
    )
    assert code == 0 and out["due"] is True and "memory/2026-03-09.md" in out["prompt"]
    assert set(out) == {
        *("sessionKey", "totalTokens", "contextWindow", "contextWindowSource"),
        *("due", "reason", "systemPrompt", "prompt", "threshold"),
    }
    assert (out["contextWindow"], out["contextWindowSource"]) == (WINDOW, "--context-window")
    code, out = run("check", KEY, "--tokens", str(THRESHOLD), "--context-window", str(WINDOW), "--read-only")
    assert out["due"] is False and out["reason"].startswith("read-only")
    code, out = run("done", KEY)
    assert code == 0 and out["sessionKey"] == KEY and out["memoryFlushCompactionCount"] == 0
    code, out = run("compacted", KEY)
    assert out["compactionCount"] == 1
    code, out = run("reset", KEY)
    assert out["cleared"] == ["compactionCount", "memoryFlushAt", "memoryFlushCompactionCount"]
    code, out = run("check", "", "--tokens", "1", "--context-window", "5")
    assert code == 2 and "session key is empty" in out["error"]


# -- configuration -------------------------------------------------------------------------------------------


def test_example_config_documents_the_agent_keys_with_their_defaults() -> None:
    agent = load_config(EXAMPLE, {"HOME": "/home/x"}).agent()
    assert agent.compaction == CompactionConfig()
    assert agent.session_context == SessionContextConfig()
    assert agent.user_timezone is None


def test_agent_list_entries_merge_over_the_defaults(tmp_path: Path, workspace: Path) -> None:
    entries = [{"id": "main"}, {"id": "work", "compaction": {"memoryFlush": {"softThresholdTokens": 8000}}}]
    defaults = {"compaction": {"reserveTokensFloor": 30000, "memoryFlush": {"prompt": "Save. NO_REPLY"}}}
    cfg = load_config(write_config(tmp_path / "c.json5", workspace, defaults, list=entries))
    work = cfg.agent("work").compaction
    assert work.reserve_tokens_floor == 30000 and work.memory_flush.soft_threshold_tokens == 8000
    assert work.memory_flush.prompt == "Save. NO_REPLY"
    assert cfg.agent("main").compaction.memory_flush.soft_threshold_tokens == 4000


def test_runtime_compaction_keys_are_ignored_and_typos_are_not(tmp_path: Path, workspace: Path) -> None:
    runtime = {"compaction": {"mode": "safeguard", "reserveTokens": 16384, "reserveTokensFloor": 24000}}
    cfg = load_config(write_config(tmp_path / "c.json5", workspace, runtime))
    assert cfg.agent().compaction.reserve_tokens_floor == 24000
    assert cfg.ignored_keys == ("agents.defaults.compaction.mode", "agents.defaults.compaction.reserveTokens")
    typo = {"compaction": {"memoryFlush": {"softTresholdTokens": 1}}}
    with pytest.raises(ConfigError, match="did you mean 'softThresholdTokens'"):
        load_config(write_config(tmp_path / "c.json5", workspace, typo))
    with pytest.raises(ConfigError, match="reserveTokensFloor: expected an integer of at least 0"):
        load_config(write_config(tmp_path / "c.json5", workspace, {"compaction": {"reserveTokensFloor": -1}}))
    with pytest.raises(ConfigError, match="userTimezone: expected an IANA time zone"):
        load_config(write_config(tmp_path / "c.json5", workspace, {"userTimezone": "Mars/Olympus"}))
