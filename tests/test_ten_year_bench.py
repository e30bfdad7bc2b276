"""benchmarks/ten_year.py: its world is seeded and well formed (the pure part), and a short real run (real
files, a real index, provider none) holds the invariants the full run reports: the lifecycle moved files, none
of them pinned, the default scope shrank, recall on the recurring topics did not fall, and reviving every
archived file gave back byte-identical files and the same search results."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mdmem.files.archive import is_pinned

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the benchmark imports its siblings (locomo, pack_latency, ten_year_world)
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def world_module() -> ModuleType:
    return load("ten_year_world")


def test_the_world_is_seeded_and_its_gold_lines_are_the_facts(world_module: ModuleType, tmp_path: Path) -> None:
    no_data = tmp_path / "absent.json"  # the chatter generators alone
    days = 400
    world = world_module.build(7, days, 2.0, 0.3, no_data)
    again = world_module.build(7, days, 2.0, 0.3, no_data)
    other = world_module.build(8, days, 2.0, 0.3, no_data)
    texts = {rel: d.text() for rel, d in world.files.items()}
    assert texts == {rel: d.text() for rel, d in again.files.items()} and world.events == again.events
    assert texts != {rel: d.text() for rel, d in other.files.items()}
    logs = [rel for rel in texts if rel.startswith("memory/20")]
    assert len(logs) == days and max(logs) == f"memory/{world.today}.md"
    assert len(set(texts.values())) == len(texts)  # no two days alike
    # every question's gold line is its fact, and the held-out wording differs from the asked one
    for held, asked in zip(world.held_out, world.asked, strict=True):
        ((rel, line),) = held.gold
        assert asked.gold == held.gold and held.text != asked.text
        assert texts[rel].splitlines()[line - 1].endswith(held.fact)
    assert {q.group for q in world.held_out} == {"recurring", "dormant", "notes", "pinned"}
    # the pins are pins mdmem sees, both kinds; the stream is in order, inside the span, and dormant topics
    # are not asked about in the last fifth of it
    assert world.pinned and all(is_pinned(texts[rel]) for rel in world.pinned)
    assert any(texts[rel].startswith("---\npinned: true") for rel in world.pinned)
    assert any("<!-- pin -->" in texts[rel] for rel in world.pinned)
    ats = [e.at for e in world.events]
    assert ats == sorted(ats) and world_module.sim_time(world.first, 0) <= ats[0]
    assert ats[-1] < world_module.sim_time(world.today, 24)
    dormant = {q.topic for q in world.held_out if q.group == "dormant"}
    late = world_module.sim_time(world.today, 0) - days // 5 * 86_400
    assert dormant and not [e for e in world.events if e.topic in dormant and e.at >= late]
    # the workspace grows: a file is written on its day, with that day's lines only
    first_log = f"memory/{world.first}.md"
    written = world.write(tmp_path / "ws", world.first)
    assert {"MEMORY.md", first_log} <= set(written) and all(world.born[rel] == world.first for rel in written)
    assert (tmp_path / "ws" / first_log).read_text() == texts[first_log]
    assert (tmp_path / "ws" / "MEMORY.md").read_text() != texts["MEMORY.md"]  # its later lines wait for their day
    assert world.write(tmp_path / "ws", world.first) == []


def test_a_short_run_moves_files_keeps_recall_and_revives_byte_identical(tmp_path: Path) -> None:
    bench = load("ten_year")
    args = ["--provider", "none", "--days", "150", "--rounds", "1", "--revive-each", "5", "--no-rebuild"]
    out = bench.main([*args, "--workdir", str(tmp_path / "run")])
    before, after = out["phases"]["before"], out["phases"]["after"]
    assert out["apply"]["moved"] > 0 and out["apply"]["skipped"] == 0 and out["apply"]["pinnedMoved"] == 0
    assert out["apply"]["held"]["pinned"] > 0 and out["apply"]["held"]["root"] == 1
    assert after["index"]["filesInScope"] == before["index"]["files"] - out["apply"]["moved"]
    assert after["index"]["chunksInScope"] < before["index"]["chunksInScope"] == before["index"]["chunks"]
    assert after["index"]["chunks"] == before["index"]["chunks"]  # archived files stay indexed
    for name in ("held-out", "asked"):
        assert after["recall"][name]["recurring"]["r@5"] >= before["recall"][name]["recurring"]["r@5"]
        assert after["recall"][name]["pinned"] == before["recall"][name]["pinned"]
    assert after["pack"]["cold"] < before["pack"]["cold"]
    revive = out["revive"]
    assert revive["archived"] == out["apply"]["moved"] and revive["stillArchived"] == 0
    assert revive["byRevive"] == 5 and revive["byUse"] == revive["archived"] - 5
    assert revive["filesIdentical"] and revive["filesDiffering"] == []
    assert revive["resultsIdentical"], revive["questionsSame"]
    assert out["phases"]["revived"]["index"]["chunksInScope"] == before["index"]["chunks"]


def test_too_few_days_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("ten_year")
    with pytest.raises(SystemExit):
        bench.parse_args(["--provider", "none", "--days", "10"])
    assert "--days: at least 30" in capsys.readouterr().err
