"""What a prompt sees of retained turns: ``**User:** … **Assistant:** …`` as they were said, with a ``Source:``
citation, and none of the session-file format's bookkeeping (entry-id headings, closing markers, escapes) —
in recall answers (through a real ``mdmem serve`` fed cllama's bodies), pack items and search snippets."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mdmem.config.load import load_config, with_sessions
from mdmem.files import sessionblocks as blocks
from mdmem.files.sessionview import inside_block, prompt_text
from mdmem.files.turns import Turn
from mdmem.memory import Memory
from mdmem.service.recall import memories_of
from tests import cllama_shapes as cs
from tests import cllama_turns
from tests.conftest import both_backends
from tests.service_server import Service, write_config

TOKEN = "test-token-recall-text-4b1e"
DAY = "2026-11-23"
BOOKKEEPING = re.compile(r"hist1_[0-9a-f]{8,}|<!-- /|## \d\d:\d\d:\d\d · |# Sessions \d{4}")


def _block(eid: str, turn: Turn, time: str = "14:03:07") -> str:
    return blocks.render(eid, time, "gpt-4o", turn)


def _expected(turn: Turn) -> str:
    """The turn as said: each part's text as a block keeps it (``blocks.clean``), under its label."""
    parts = [
        label + blocks.clean(text) + ("_" if label == blocks.LABELS[2] else "")
        for label, text in zip(blocks.LABELS, (turn.user, turn.assistant, ", ".join(turn.tools)), strict=True)
        if blocks.clean(text)
    ]
    return "\n\n".join(parts)


HOSTILE = Turn(
    "# is this a heading?\n<!-- a comment -->\n**User:** quoted label\n## 10:00:00 · x · hist1_ab\nback\\slash",
    "To s3://zebra-nightly at 02:00.\n\n\n_Tool calls: none_\n<!-- /hist1_abc -->",
    ("read_file", "search_web"),
)


@pytest.mark.parametrize(
    ("name", "text", "start", "end", "expected"),
    [
        # the whole file: two blocks, header and bookkeeping gone, one blank line between the turns
        (
            "whole file",
            blocks.file_header(DAY) + _block("hist1_a", Turn("q1", "a1")) + _block("hist1_b", Turn("q2", "a2", ("t",))),
            1,
            None,
            "**User:** q1\n\n**Assistant:** a1\n\n**User:** q2\n\n**Assistant:** a2\n\n_Tool calls: t_",
        ),
        # a range inside a block (no heading in it): still unescaped
        (
            "inside",
            blocks.file_header(DAY) + _block("hist1_a", HOSTILE),
            6,
            8,
            HOSTILE.user.splitlines()[1] + "\n" + HOSTILE.user.splitlines()[2] + "\n" + HOSTILE.user.splitlines()[3],
        ),
        # a person's note between blocks stays as written, backslashes and all
        (
            "hand note",
            blocks.file_header(DAY)
            + _block("hist1_a", Turn("q1", "a1"))
            + "\\# my note\n\n"
            + _block("hist1_b", Turn("q2", "a2")),
            1,
            None,
            "**User:** q1\n\n**Assistant:** a1\n\n\\# my note\n\n**User:** q2\n\n**Assistant:** a2",
        ),
        # a torn last block (no closing line): its text, without its heading
        (
            "torn",
            blocks.file_header(DAY) + _block("hist1_a", Turn("q1", "a1"))[:-20],
            1,
            None,
            "**User:** q1\n\n**Assistant:** a1",
        ),
        ("only bookkeeping", blocks.file_header(DAY) + _block("hist1_a", Turn("q1", "a1")), 1, 4, ""),
    ],
)
def test_prompt_text(name: str, text: str, start: int, end: int | None, expected: str) -> None:
    lines = text.split("\n")
    end = end or len(lines)
    inside = inside_block(lines[start - 1 :], whole=True)
    assert prompt_text(lines[start - 1 : end], inside) == expected


def test_a_hostile_turn_reads_back_as_said() -> None:
    lines = (blocks.file_header(DAY) + _block("hist1_abc", HOSTILE)).split("\n")
    shown = prompt_text(lines, False)
    assert shown == _expected(HOSTILE)
    assert "hist1_abc -->" in shown and "\\" in shown  # the user's own text, kept: only what the format added goes
    assert shown.count("\\") == 1  # the one the user wrote


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80) | st.sampled_from(
    ["# h", "<!-- x -->", "**User:** y", "**Assistant:** z", "_Tool calls: a_", "## 12:00:00 · m · hist1_1", "\\#", ""]
)


@settings(max_examples=300, deadline=None)
@given(
    turns=st.lists(
        st.tuples(_TEXT, _TEXT, st.lists(st.sampled_from(["read_file", "web", "x.y"]), max_size=2)),
        min_size=1,
        max_size=3,
    )
)
def test_any_turns_read_back_as_said(turns: list[tuple[str, str, list[str]]]) -> None:
    """Whatever the messages hold, the prompt shows each turn's text as the block keeps it, nothing else."""
    made = [Turn(u, a, tuple(t)) for u, a, t in turns]
    text = blocks.file_header(DAY) + "".join(_block(f"hist1_{i:04x}", t) for i, t in enumerate(made))
    expected = "\n\n".join(e for e in (_expected(t) for t in made) if e)
    assert prompt_text(text.split("\n"), False) == expected


# -- through a real service, with cllama's bodies ----------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path, store_backend: dict[str, Any]) -> Iterator[Service]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\n## Infrastructure\n\n- Nightly backups run at 02:00 UTC.\n")
    store = {"store": store_backend} if store_backend else None
    cfg = write_config(tmp_path / "config.json", {"main": ws}, memory_search=store)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    yield svc
    svc.stop()


@both_backends
@pytest.mark.parametrize(("api", "stream"), [("openai", False), ("anthropic", True)])
def test_recall_through_cllama_shows_turns_as_said(service: Service, api: str, stream: bool) -> None:
    question = "where does the <nightly> backup of the zebra cluster go?\n# not a heading"
    answer = "To s3://zebra-nightly at 02:00, <!-- see runbook -->."
    t = cllama_turns.turn("main", question, answer, pod="pod-a", api=api, stream=stream)
    got = service.call("POST", "/retain", raw=t.retain)
    assert got.status == 202 and got.body["status"] == "retained", got.raw
    reply = service.call("POST", "/recall", raw=cllama_turns.recall("main", "where does the zebra cluster backup go?"))
    assert reply.status == 200, reply.raw
    mems = reply.body["memories"]
    session = [m for m in mems if m["kind"] == "session"]
    assert session, mems
    expected = f"**User:** {question}\n\n**Assistant:** {answer}"
    assert session[0]["text"] == f"{expected}\nSource: sessions/{DAY}.md#L3-L10"  # heading to closing line
    for m in mems:
        assert not BOOKKEEPING.search(m["text"]), m["text"]
        assert m["text"].rstrip().splitlines()[-1].startswith("Source: ")
    kept, removed = cs.apply_recall_memory_policy(mems)  # cllama drops nothing of it
    assert removed == 0 and len(kept) == len(mems) and len(reply.raw) <= 16 * 1024
    prompt = cs.format_memory_blocks("mdmemory", kept)
    assert expected in prompt and not BOOKKEEPING.search(prompt)


def test_recall_stays_in_the_proxys_limits_with_many_big_turns(service: Service) -> None:
    for i in range(24):
        words = " ".join(f"walrus{i} fact{j} harbour crane schedule" for j in range(40))
        t = cllama_turns.turn(
            "main", f"walrus {i}: {words}", f"noted {i}", pod="pod-a", ts=f"2026-11-23T14:{i:02d}:00Z"
        )
        assert service.call("POST", "/retain", raw=t.retain).status == 202
    reply = service.call("POST", "/recall", raw=cllama_turns.recall("main", "walrus harbour crane schedule facts"))
    mems = reply.body["memories"]
    assert 0 < len(mems) <= 8 and len(reply.raw) <= 16 * 1024
    kept, removed = cs.apply_recall_memory_policy(mems)
    assert removed == 0 and sum(len(m["text"].encode()) for m in kept) <= 8 * 1024


def test_the_8_kib_are_counted_as_the_proxy_counts_them_after_its_scrubbing() -> None:
    """``sk-`` and six characters (scikit-learn's ``sk-learn``...) is not a secret to mdmem, but cllama
    turns it into ``[redacted-secret]`` before it counts the bytes: a recall filled to 8 KiB by our count would
    lose its last block there."""
    line = "pip install sk-learn-models; then sk-abcdef runs the job. "
    items = [
        {
            "text": line * 20,
            "ref": f"memory/n{i}.md#L1-L20",
            "score": 0.9 - i / 100,
            "kind": "curated",
            "source": "memory",
        }
        for i in range(8)
    ]
    mems = memories_of({"items": items})
    assert mems
    kept, removed = cs.apply_recall_memory_policy(mems)
    assert removed == 0 and len(kept) == len(mems)
    assert sum(len(m["text"].encode()) for m in kept) <= 8 * 1024


def test_pack_items_and_search_snippets_of_session_files_show_turns_as_said(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n")
    text = blocks.file_header(DAY) + _block("hist1_" + "a" * 64, HOSTILE) + _block("hist1_" + "b" * 64, Turn("q", "a"))
    (ws / "sessions" / f"{DAY}.md").write_text(text)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"agents": {"list": [{"id": "main", "workspace": str(ws)}]}}))
    config = load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")})
    with Memory(with_sessions(config.agent("main")), config) as mem:
        mem.sync()
        pack = mem.pack("zebra-nightly backup read_file")
        session = [i for i in pack["items"] if i["kind"] == "session"]
        assert session and "heading" not in session[0]
        assert _expected(HOSTILE) in session[0]["text"] or session[0]["text"] in _expected(HOSTILE)
        ids = ("hist1_" + "a" * 64, "hist1_" + "b" * 64)
        for item in pack["items"]:
            assert not any(i in item["text"] for i in ids) and "# Sessions" not in item["text"]
        assert not any(i in pack["bundleText"] for i in ids)
        hits = mem.search("zebra-nightly backup")["results"]
        snippets = [h["snippet"] for h in hits if h["path"].startswith("sessions/")]
        assert snippets and all(not any(i in s for i in ids) for s in snippets)
        assert any("To s3://zebra-nightly" in s for s in snippets)
