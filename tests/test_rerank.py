"""Re-ranking levers: temporal decay of dated daily logs and MMR diversity (both off by default)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import pytest

from mdmem.config.load import load_config
from mdmem.files import clock
from mdmem.memory import Memory
from mdmem.search.scoring import decay_factor, log_date, mmr_order
from mdmem.util.errors import ConfigError
from tests.conftest import write

NOTE = "The deploy uses a blue-green rollout with canary checks before the switch."


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("memory/2026-03-09.md", date(2026, 3, 9)),
        ("memory/2026-03-09-standup.md", date(2026, 3, 9)),
        ("memory/archive/2025-12-31.md", date(2025, 12, 31)),
        ("MEMORY.md", None),
        ("memory.md", None),
        ("memory/notes.md", None),
        ("memory/2026-02-30.md", None),  # not a date
        ("notes/2026-03-09.md", None),  # not a daily log: outside memory/
        ("memory/2026-03-09.txt", None),
    ],
)
def test_log_date(path: str, expected: date | None) -> None:
    assert log_date(path) == expected


def test_decay_factor_halves_every_half_life_and_never_grows() -> None:
    today = date(2026, 3, 31)
    assert decay_factor("memory/2026-03-01.md", today, 30) == pytest.approx(0.5)
    assert decay_factor("memory/2026-01-30.md", today, 30) == pytest.approx(0.25)
    assert decay_factor("memory/2026-03-31.md", today, 30) == 1.0
    assert decay_factor("memory/2026-04-05.md", today, 30) == 1.0  # a future date is not a bonus
    assert decay_factor("MEMORY.md", today, 30) == 1.0
    assert decay_factor("memory/people.md", today, 30) == 1.0


def test_mmr_order_trades_a_near_duplicate_for_a_different_result() -> None:
    texts = {1: "restic backs up the nas nightly", 2: "restic backs up the nas nightly", 3: "laptop goes to b2"}
    scores = {1: 1.0, 2: 0.99, 3: 0.6}
    assert mmr_order([1, 2, 3], scores, texts, 0.7, 3) == [1, 3, 2]
    assert mmr_order([1, 2, 3], scores, texts, 0.9, 3) == [1, 2, 3]  # relevance wins when lambda is high
    assert mmr_order([1, 2, 3], scores, texts, 1.0, 3) == [1, 2, 3]
    assert mmr_order([1, 2, 3], scores, texts, 0.7, 1) == [1, 2, 3]  # only the first k are re-ordered


def _daily(workspace: Path, today: date, days_ago: int, text: str) -> str:
    rel = clock.daily_log(today - timedelta(days=days_ago))
    write(workspace / rel, f"# Ops\n\n{text}\n")
    return rel


@pytest.mark.parametrize("provider", ["none", "hash"])
def test_temporal_decay_orders_logs_by_age_and_spares_undated_files(
    workspace: Path, make_memory: Callable[..., Memory], provider: str
) -> None:
    probe = make_memory(provider=provider)
    today = clock.day(probe.agent)
    write(workspace / "MEMORY.md", f"# Ops\n\n{NOTE}\n")
    write(workspace / "memory" / "runbook.md", f"# Ops\n\n{NOTE}\n")
    recent = _daily(workspace, today, 10, NOTE)
    old = _daily(workspace, today, 40, NOTE)

    plain = make_memory(provider=provider)
    plain.sync()
    before = {r["path"]: r["score"] for r in plain.search("blue-green rollout canary")["results"]}
    assert set(before) == {"MEMORY.md", "memory/runbook.md", recent, old}
    assert len({round(s, 6) for s in before.values()}) == 1  # same text, same score: nothing favours age

    decayed = make_memory(
        {"query": {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}}, provider=provider
    )
    results = decayed.search("blue-green rollout canary")["results"]
    after = {r["path"]: r["score"] for r in results}
    assert [r["path"] for r in results][2:] == [recent, old]
    assert after["MEMORY.md"] == pytest.approx(before["MEMORY.md"], abs=1e-4)
    assert after["memory/runbook.md"] == pytest.approx(before["memory/runbook.md"], abs=1e-4)
    assert after[recent] == pytest.approx(before[recent] * 0.5 ** (10 / 30), abs=1e-4)  # scores have 4 decimals
    assert after[old] == pytest.approx(before[old] * 0.5 ** (40 / 30), abs=1e-4)


def test_temporal_decay_reorders_but_does_not_hide_old_logs(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    probe = make_memory()
    today = clock.day(probe.agent)
    ancient = _daily(workspace, today, 3650, NOTE)  # ten years: factor 0.5 ** 121, far below minScore
    mem = make_memory({"query": {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}})
    mem.sync()
    results = mem.search("blue-green rollout canary", min_score=0.35)["results"]
    assert [r["path"] for r in results] == [ancient]
    assert results[0]["score"] < 1e-4


@pytest.mark.parametrize("provider", ["none", "hash"])
def test_mmr_promotes_a_different_note_over_a_copy(
    workspace: Path, make_memory: Callable[..., Memory], provider: str
) -> None:
    dup = "Backups: restic snapshots the NAS nightly at 02:00 and keeps thirty daily snapshots."
    write(workspace / "MEMORY.md", f"# Backups\n\n{dup}\n")
    write(workspace / "memory" / "copy.md", f"# Backups\n\n{dup}\n")
    write(workspace / "memory" / "laptop.md", "# Laptop\n\nLaptop backups go to B2 with restic, nightly too.\n")
    query = "restic backups snapshots nightly"

    plain = make_memory(provider=provider)
    plain.sync()
    order = [r["path"] for r in plain.search(query, min_score=0.0)["results"]]
    assert sorted(order[:2]) == ["MEMORY.md", "memory/copy.md"] and order[2] == "memory/laptop.md"

    diverse = make_memory({"query": {"hybrid": {"mmr": {"enabled": True, "lambda": 0.5}}}}, provider=provider)
    results = diverse.search(query, min_score=0.0)["results"]
    assert [r["path"] for r in results][1] == "memory/laptop.md"
    assert {r["path"] for r in results} == set(order)  # re-ordered, nothing dropped
    by_path = {r["path"]: r["score"] for r in plain.search(query, min_score=0.0)["results"]}
    assert all(r["score"] == pytest.approx(by_path[r["path"]], abs=1e-4) for r in results)  # each keeps its score


@pytest.mark.parametrize(
    ("lever", "fragment"),
    [
        ({"mmr": {"lambda": 1.5}}, "query.hybrid.mmr.lambda: expected a number from 0 to 1"),
        ({"temporalDecay": {"halfLifeDays": 0}}, "query.hybrid.temporalDecay.halfLifeDays"),
        ({"mmr": {"lamda": 0.5}}, "did you mean 'lambda'"),
    ],
)
def test_lever_config_errors_name_the_key(tmp_path: Path, lever: dict[str, object], fragment: str) -> None:
    cfg = tmp_path / "config.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"query": {"hybrid": lever}}}}}))
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(cfg)
