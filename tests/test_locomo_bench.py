"""The pure parts of benchmarks/locomo.py: evidence parsing, workspace writing, the metric, config writing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "locomo.py"


@pytest.fixture(scope="module")
def locomo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("locomo_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def turn(dia_id: str, speaker: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


def conversation(sample_id: str, a: str, b: str, sessions: dict[int, tuple[str, list[dict[str, Any]]]], qa=()):
    conv: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    for n, (stamp, turns) in sessions.items():
        conv[f"session_{n}_date_time"] = stamp
        conv[f"session_{n}"] = turns
    return {"sample_id": sample_id, "conversation": conv, "qa": list(qa)}


@pytest.fixture
def dataset() -> list[dict[str, Any]]:
    """Two tiny conversations; conv-b's first session shares a date with conv-a's second."""
    a = conversation(
        "conv-a",
        "Ann",
        "Bo",
        {
            1: ("1:56 pm on 8 May, 2023", [turn("D1:1", "Ann", "I adopted a cat."), turn("D1:2", "Bo", "Nice!")]),
            2: (
                "10:05 am on 9 May, 2023",
                [
                    turn("D2:1", "Bo", "Look at my garden\n", blip_caption="a photo of tomatoes", img_url=["x"]),
                    turn("D2:2", "Ann", "Lovely tomatoes."),
                ],
            ),
            3: ("11:00 am on 10 May, 2023", []),  # a date with no turns, as in the dataset
        },
        qa=[
            {"question": "What pet did Ann adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
            {"question": "What grows?", "answer": "tomatoes", "evidence": ["D2:1; D2:02"], "category": 1},
            {"question": "Ghost?", "answer": "?", "evidence": ["D9:9", "D"], "category": 2},
            {"question": "Cat?", "evidence": ["D:1:1"], "category": 5, "adversarial_answer": "dog"},
        ],
    )
    b = conversation(
        "conv-b",
        "Cy",
        "Di",
        {1: ("8:00 am on 9 May, 2023", [turn("D1:1", "Cy", "Morning run done."), turn("D1:2", "Di", "Go you")])},
        qa=[{"question": "What did Cy do?", "answer": "run", "evidence": ["D1:1"], "category": 4}],
    )
    return [a, b]


def test_parse_evidence_normalises_messy_ids(locomo: ModuleType) -> None:
    assert locomo.parse_evidence(["D8:6; D9:17"]) == (["D8:6", "D9:17"], 0)
    assert locomo.parse_evidence(["D:11:26", "D30:05"]) == (["D11:26", "D30:5"], 0)
    assert locomo.parse_evidence(["D1:3", "D1:03", "D", ""]) == (["D1:3"], 2)


def test_turn_line_collapses_newlines_and_adds_caption(locomo: ModuleType) -> None:
    line = locomo.turn_line(turn("D2:1", "Bo", "Look\n\nhere ", blip_caption="a photo of a dog"))
    assert line == "Bo: Look here [shares a photo: a photo of a dog]"


def test_workspace_lines_map_to_turns(locomo: ModuleType, dataset: list[dict[str, Any]], tmp_path: Path) -> None:
    where = locomo.write_workspace(dataset, tmp_path)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.md"))
    assert files == ["memory/2023-05-08.md", "memory/2023-05-09.md"]
    turns = {
        (c["sample_id"], t["dia_id"]): t
        for c in dataset
        for key, value in c["conversation"].items()
        if isinstance(value, list)
        for t in value
    }
    assert set(where) == set(turns)
    for key, (rel, line) in where.items():
        text = (tmp_path / rel).read_text(encoding="utf-8").split("\n")[line - 1]
        assert text == locomo.turn_line(turns[key])
        assert " ".join(turns[key]["text"].split()) in text
    everything = "".join(p.read_text(encoding="utf-8") for p in tmp_path.rglob("*.md"))
    assert not locomo.DIALOG_ID.search(everything)
    assert "D1:" not in everything and "D2:" not in everything
    # Two conversations on 9 May share a file, in time order, each under its own heading.
    day = (tmp_path / "memory/2023-05-09.md").read_text(encoding="utf-8")
    assert day == (
        "## 8:00 am on 9 May, 2023 — Cy and Di\n\nCy: Morning run done.\nDi: Go you\n\n"
        "## 10:05 am on 9 May, 2023 — Ann and Bo\n\n"
        "Bo: Look at my garden [shares a photo: a photo of tomatoes]\nAnn: Lovely tomatoes.\n"
    )


def test_questions_skip_missing_evidence(locomo: ModuleType, dataset: list[dict[str, Any]], tmp_path: Path) -> None:
    where = locomo.write_workspace(dataset, tmp_path)
    qs = locomo.build_questions(dataset, where, None)
    assert (qs.no_gold, qs.missing_ids, qs.unparsable) == (1, 1, 1)
    by_text = {q.text: q for q in qs.questions}
    assert by_text["What grows?"].gold == frozenset({("memory/2023-05-09.md", 8), ("memory/2023-05-09.md", 9)})
    assert by_text["Cat?"].category == 5 and by_text["Cat?"].gold == {("memory/2023-05-08.md", 3)}
    assert by_text["What did Cy do?"].gold == {("memory/2023-05-09.md", 3)}
    assert len(locomo.build_questions(dataset, where, 1).questions) == 2  # first question of each conversation


def test_score_known_rankings(locomo: ModuleType) -> None:
    gold = frozenset({("a.md", 5), ("a.md", 20), ("b.md", 3)})
    ranking = [("a.md", 30, 40), ("b.md", 1, 4), ("c.md", 1, 9), ("a.md", 1, 10), ("a.md", 15, 25)]
    assert locomo.score(ranking, gold) == {"r@1": 0.0, "r@5": 1.0, "r@10": 1.0, "mrr": 0.5}
    # Overlapping chunks: a gold line counted once; results past rank 10 ignored.
    ranking = [("a.md", 1, 6), ("a.md", 4, 8)] + [("z.md", 1, 1)] * 8 + [("b.md", 3, 3)]
    assert locomo.score(ranking, gold) == pytest.approx({"r@1": 1 / 3, "r@5": 1 / 3, "r@10": 1 / 3, "mrr": 1.0})
    assert locomo.score([], gold) == {"r@1": 0.0, "r@5": 0.0, "r@10": 0.0, "mrr": 0.0}


def test_aggregate_per_category_split_and_overall(locomo: ModuleType) -> None:
    Q = locomo.Question
    gold = frozenset({("a.md", 1)})
    one = {"r@1": 1.0, "r@5": 1.0, "r@10": 1.0, "mrr": 1.0}
    zero = dict.fromkeys(one, 0.0)
    rows = [(Q("conv-26", "x", 4, gold), one), (Q("conv-41", "y", 1, gold), zero), (Q("conv-41", "z", 5, gold), one)]
    figures = locomo.aggregate(rows)
    assert figures["all"]["overall"] == {"n": 2, "r@1": 0.5, "r@5": 0.5, "r@10": 0.5, "mrr": 0.5}
    assert figures["all"]["adversarial"]["n"] == 1  # category 5 stays out of overall
    assert figures["tune"]["overall"]["mrr"] == 1.0 and figures["confirm"]["overall"]["mrr"] == 0.0
    assert figures["confirm"]["multi-hop"]["n"] == 1 and "single-hop" not in figures["confirm"]


def test_config_settings_and_index_sharing(locomo: ModuleType, tmp_path: Path) -> None:
    assert locomo.parse_set("memorySearch.query.hybrid.fusion=rrf") == ("memorySearch.query.hybrid.fusion", "rrf")
    assert locomo.parse_set("memorySearch.chunking.tokens=256") == ("memorySearch.chunking.tokens", 256)
    assert locomo.parse_set('memorySearch.extraPaths=["x"]') == ("memorySearch.extraPaths", ["x"])
    overrides = [locomo.parse_set("memorySearch.query.hybrid.fusion=rrf")]
    trees = {
        name: locomo.config_tree(tmp_path, tmp_path / "m.gguf", locomo.retriever_settings(name, "local", overrides))
        for name in locomo.RETRIEVERS
    }
    ms = trees["vector"]["agents"]["defaults"]["memorySearch"]
    assert ms["query"]["hybrid"] == {"fusion": "rrf", "enabled": False}
    assert ms["provider"] == "local" and ms["sync"]["onSearch"] is False
    assert trees["keyword"]["agents"]["defaults"]["memorySearch"]["provider"] == "none"
    keys = {name: locomo.index_key(tree) for name, tree in trees.items()}
    assert keys["vector"] == keys["hybrid"] != keys["keyword"]
    json.dumps(trees)  # the config file is plain JSON


def test_config_file_loads_in_mdmemory(locomo: ModuleType, tmp_path: Path) -> None:
    from mdmem.config.load import load_config

    settings = locomo.retriever_settings("keyword", "local", [("memorySearch.chunking.tokens", 256)])
    tree = locomo.config_tree(tmp_path, tmp_path / "m.gguf", settings)
    path = tmp_path / "c.json5"
    path.write_text(json.dumps(tree))
    agent = load_config(path).agent()
    assert agent.memory_search.provider == "none" and agent.memory_search.chunking.tokens == 256


def test_keyword_run_end_to_end(locomo: ModuleType, dataset: list[dict[str, Any]], tmp_path: Path) -> None:
    data = tmp_path / "dev.json"
    data.write_text(json.dumps(dataset))
    out = tmp_path / "out.json"
    assert locomo.main(["--data", str(data), "--provider", "none", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    keyword = report["retrievers"]["keyword"]
    assert keyword["modes"] == ["keyword"] and report["questions"] == 4 and report["skippedNoGold"] == 1
    assert keyword["figures"]["all"]["single-hop"]["r@1"] == 1.0
