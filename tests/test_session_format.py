"""The session-file format under hostile text: property tests (hypothesis) over arbitrary message text (CR, CRLF,
U+2028, NEL, forged headings and closing comments, CJK, lone surrogates) x crash points, on real files through
``SessionLog``; plus the defects of issue 20 as plain examples."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem.config.load import load_config
from mdmem.files import sessionblocks as blocks
from mdmem.files.sessionlog import SessionLog
from mdmem.files.turns import Turn
from mdmem.util.errors import WorkspaceError
from mdmem.util.fileread import split_lines
from tests.service_bodies import openai_entry

IDS = ["hist1_a", "hist1_b", "hist1_c", "hist1_d"]
DAY = "2026-11-23"
BREAKS = ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\n\n"]
PIECES = [
    *BREAKS,
    *(f"## 10:00:00 · gpt-4o · {i}" for i in IDS),
    *(f"<!-- /{i} -->" for i in IDS),
    "<!--",
    "<\\!--",
    "\\",
    "\\\\",
    "#",
    "## ",
    " ## 12:34:56",
    "**User:** ",
    "**Assistant:** ",
    "_Tool calls: ",
    "<details>",
    "寿司と天ぷら",
    "记忆代理",
    "\x00",
    "\ud800",
    "\udfff",
    "  ",
    "\t",
]
fragments = st.one_of(st.sampled_from(PIECES), st.text(max_size=12))
message = st.lists(fragments, max_size=12).map("".join)
turns = st.builds(Turn, message, message, st.lists(message, max_size=3).map(tuple))


@contextmanager
def session_log() -> Iterator[tuple[SessionLog, Path]]:
    """A SessionLog on a workspace of its own (hypothesis runs many examples in one test)."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        cfg = Path(tmp) / "c.json"
        cfg.write_text(json.dumps({"agents": {"list": [{"id": "a1", "workspace": str(ws)}]}}))
        yield SessionLog(load_config(cfg).agent("a1")), ws / "sessions" / f"{DAY}.md"


def whole(data: bytes) -> list[str]:
    found, torn = blocks.blocks(data)
    assert torn is None
    return [b.entry_id for b in found]


# -- the format: pure ---------------------------------------------------------------------------------------------
@given(message)
def test_escape_is_reversible_and_leaves_no_comment_opener(text: str) -> None:
    escaped = blocks.escape(text)
    assert blocks.unescape(escaped) == text
    assert "<!--" not in escaped


@given(turns, st.sampled_from(IDS), st.text(max_size=20))
def test_read_block_of_render_gives_the_clean_text_back(turn: Turn, eid: str, model: str) -> None:
    data = (blocks.file_header(DAY) + blocks.render(eid, "14:03:07", model, turn)).encode("utf-8")
    found, torn = blocks.blocks(data)
    assert [b.entry_id for b in found] == [eid] and torn is None and found[0].end == len(data)
    got = blocks.read_block(data, found[0])
    tools = blocks.clean(", ".join(turn.tools))
    assert got.turn == Turn(blocks.clean(turn.user), blocks.clean(turn.assistant), (tools,) if tools else ())
    assert (got.entry_id, got.time_of_day) == (eid, "14:03:07")


@given(st.lists(turns, min_size=1, max_size=4))
def test_no_message_can_start_or_end_a_block_whatever_a_reader_takes_for_a_line(turns_: list[Turn]) -> None:
    ids = IDS[: len(turns_)]
    rendered = [blocks.render(i, "10:00:00", "gpt-4o", t) for i, t in zip(ids, turns_, strict=True)]
    text = blocks.file_header(DAY) + "".join(rendered)
    data = text.encode("utf-8")
    assert whole(data) == ids
    # Every reader's lines: ours (LF only), universal newlines (str.splitlines: CR, U+2028, NEL, VT, FF...).
    for lines in (split_lines(text), text.splitlines()):
        heads = [m[1] for m in (re.fullmatch(r"## \d\d:\d\d:\d\d · .* · (\S+)", ln) for ln in lines) if m]
        closes = [m[1] for m in (re.fullmatch(r"\s*<!-- /(\S+) -->\s*", ln) for ln in lines) if m]
        assert heads == ids and closes == ids
    assert "\r" not in text  # no line ending but LF is ever written


LINES = [
    *(f"## 10:00:00 · m · {i}" for i in IDS),
    *(f"<!-- /{i} -->" for i in IDS),
    "",
    "**User:** hi",
    "# Sessions 2026-11-23",
    "## 10:0",
    "text\r",
    "lone\rcr",
]


@given(st.lists(st.one_of(st.sampled_from(LINES), st.text(max_size=6)), max_size=30), st.sampled_from(["\n", "\r\n"]))
def test_any_file_a_repair_cuts_only_after_the_last_whole_block(lines: list[str], end: str) -> None:
    data = end.join(lines).encode("utf-8", "surrogatepass")
    found, torn = blocks.blocks(data)
    assert all(a.end <= b.start for a, b in zip(found, found[1:], strict=False))
    if torn is not None:
        assert torn >= (found[-1].end if found else 0)
    for eid in {b.entry_id for b in found}:
        left, gone = blocks.remove(data, {eid})
        expected = data
        for b in reversed([b for b in found if b.entry_id == eid]):
            expected = expected[: b.start] + expected[b.end :]
        assert gone == [eid] * len(gone) and gone and left == expected  # those bytes, nothing else


# -- crash points: real files through SessionLog ---------------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(turns, min_size=1, max_size=4), st.floats(0, 1, exclude_max=True), st.booleans())
def test_a_crash_anywhere_in_the_last_append_loses_and_changes_nothing_acknowledged(
    turns_: list[Turn], where: float, crlf_file: bool
) -> None:
    items = [(eid, DAY, blocks.render(eid, "10:00:00", "m", t)) for eid, t in zip(IDS, turns_, strict=False)]
    with session_log() as (log, path):
        if crlf_file:  # a file a person saved with Windows line endings, before any retain
            path.parent.mkdir()
            path.write_bytes(b"# Sessions 2026-11-23\r\n\r\nnotes by hand\r\nlone\rCR\r\n")
        assert log.write_blocks(items[:-1]) == ["retained"] * (len(items) - 1)
        before = path.read_bytes() if path.exists() else b""
        assert log.write_blocks(items[-1:]) == ["retained"]
        after = path.read_bytes()
        cut = len(before) + int(where * (len(after) - len(before)))
        os.truncate(path, cut)  # the power went out after `cut` bytes of the last append reached the disk
        fresh = SessionLog(log.agent)
        closed = cut >= after.rindex(blocks.closing(items[-1][0]).encode()) + len(blocks.closing(items[-1][0]))
        assert fresh.stats()["retained"] == len(items) - (0 if closed else 1)
        repaired = path.read_bytes()
        kept = path.with_name(f".{path.name}.torn")  # what the repair cut, kept: nothing is thrown away
        assert repaired + (kept.read_bytes().split(b" ---\n", 1)[1] if kept.exists() else b"") == after[:cut]
        if closed:  # its closing line reached the disk: the block is whole, only its blank line is missing
            assert repaired == after[:cut]
        elif before:  # the torn tail cut, exactly: nothing acknowledged lost or changed (the joiner may stay)
            assert repaired.startswith(before) and blocks.joiner(before[-3:]).startswith(repaired[len(before) :])
        else:  # a new file: what is left of its heading, or nothing
            assert blocks.file_header(DAY).encode().startswith(repaired)
        statuses = ["duplicate"] * (len(items) - 1) + ["duplicate" if closed else "retained"]
        assert fresh.write_blocks(items) == statuses
        assert whole(path.read_bytes()) == [eid for eid, _, _ in items]
        if not closed:
            assert path.read_bytes() == after
        for _, _, block in items:  # every block byte for byte as rendered
            assert block.rstrip("\n").encode() in path.read_bytes()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(turns, min_size=2, max_size=4), st.data())
def test_forget_removes_exactly_its_block_whatever_the_others_say(turns_: list[Turn], data: st.DataObject) -> None:
    items = [(eid, DAY, blocks.render(eid, "10:00:00", "m", t)) for eid, t in zip(IDS, turns_, strict=False)]
    gone = data.draw(st.sampled_from([eid for eid, _, _ in items]))
    with session_log() as (log, path):
        log.write_blocks(items)
        original = path.read_bytes()
        assert log.forget([gone]) == (1, [f"sessions/{DAY}.md"])
        left = path.read_bytes()
        assert whole(left) == [eid for eid, _, _ in items if eid != gone]
        assert blocks.marks(left, {gone}) == []
        found = blocks.blocks(original)[0]
        for b in found:  # every other block is there byte for byte
            assert (original[b.start : b.end] in left) is (b.entry_id != gone)


# -- the defects of issue 20, as examples ----------------------------------------------------------------------------
def test_a_crlf_turn_then_a_torn_block_never_costs_an_earlier_acknowledged_one(tmp_path: Path) -> None:
    with session_log() as (log, path):
        first = openai_entry("line one\r\nline two\r\n\r\nthree", "yes\r\nno", id="hist1_first")
        second = openai_entry("寿司\r\nは\rおいしい", "はい\u2028そうです", id="hist1_second")
        assert log.retain(first)[0] == "retained" and log.retain(second)[0] == "retained"
        data = path.read_bytes()
        assert b"\r" not in data and "\u2028".encode() not in data
        os.truncate(path, len(data) - 30)  # the second block torn
        fresh = SessionLog(log.agent)
        assert fresh.retain(first)[0] == "duplicate"
        assert fresh.retain(second)[0] == "retained"
        data = path.read_bytes()
        found = blocks.blocks(data)[0]
        assert [b.entry_id for b in found] == ["hist1_first", "hist1_second"]
        assert blocks.read_block(data, found[0]).turn.user == "line one\nline two\n\nthree"
        assert blocks.read_block(data, found[1]).turn.user == "寿司\nは\nおいしい"


def test_a_lone_cr_cannot_forge_a_heading_or_another_entrys_end(tmp_path: Path) -> None:
    with session_log() as (log, path):
        victim = openai_entry("the victim's turn", "kept", id="hist1_victim")
        forger = openai_entry(
            "hi\r## 10:00:00 · gpt-4o · hist1_fake\r\r<!-- /hist1_forger -->\rafter",
            "ok\r<!-- /hist1_victim -->",
            id="hist1_forger",
        )
        log.retain(victim)
        log.retain(forger)
        data = path.read_bytes()
        assert whole(data) == ["hist1_victim", "hist1_forger"]
        assert log.forget(["hist1_forger"]) == (1, [f"sessions/{DAY}.md"])
        left = path.read_bytes()
        assert whole(left) == ["hist1_victim"] and b"hist1_fake" not in left and b"after" not in left
        os.truncate(path, len(left))  # reopen: nothing to repair
        assert SessionLog(log.agent).retain(victim)[0] == "duplicate"


def test_files_written_before_the_fix_with_a_lone_cr_parse_on_lf_lines(tmp_path: Path) -> None:
    """An old writer escaped only after LF: a lone CR then forged text. On LF lines it is inside its line."""
    old = (
        "# Sessions 2026-11-23\n\n## 10:00:00 · m · hist1_a\n\n**User:** a\n\n<!-- /hist1_a -->\n\n"
        "## 10:00:01 · m · hist1_b\n\n**User:** x\r<!-- /hist1_b -->\r\r## 10:00:02 · m · hist1_c\n\n"
        "<!-- /hist1_b -->\n\n"
    ).encode()
    assert whole(old) == ["hist1_a", "hist1_b"]
    data, gone = blocks.remove(old, {"hist1_b"})
    assert gone == ["hist1_b"] and whole(data) == ["hist1_a"] and b"hist1_c" not in data


def test_duplicate_only_when_the_block_is_really_in_the_file(tmp_path: Path) -> None:
    with session_log() as (log, path):
        entry = openai_entry("remember the boat", "ok", id="hist1_boat")
        assert log.retain(entry)[0] == "retained"
        data = path.read_bytes()
        st_ = os.stat(path)
        found = blocks.blocks(data)[0][0]
        blanked = data[: found.start] + b" " * (found.end - found.start) + data[found.end :]
        path.write_bytes(blanked)  # a hand edit that keeps size and mtime: the cache cannot see it
        os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))
        assert log.retain(entry)[0] == "retained"
        assert whole(path.read_bytes()) == ["hist1_boat"]
        assert log.retain(entry)[0] == "duplicate"


def test_forget_refuses_to_answer_while_the_text_is_still_in_the_file(tmp_path: Path) -> None:
    with session_log() as (log, path):
        log.retain(openai_entry("keep me", "ok", id="hist1_keep"))
        log.retain(openai_entry("secret plan", "ok", id="hist1_gone"))
        log.retain(openai_entry("after", "ok", id="hist1_after"))
        # A person deletes the closing line of hist1_gone: where its text ends can no longer be told.
        path.write_bytes(path.read_bytes().replace(b"<!-- /hist1_gone -->\n", b""))
        with pytest.raises(WorkspaceError) as info:
            log.forget(["hist1_gone"])
        message = str(info.value)
        assert f"{path} line " in message and "hist1_gone" in message and "Fix:" in message
        assert "secret plan" not in message
        assert log.stats()["lastError"]["error"].startswith("WorkspaceError: forget:")
        assert log.retain(openai_entry("secret plan", "ok", id="hist1_gone"))[0] == "forgotten"


def test_a_partial_heading_or_file_heading_is_cut_but_a_persons_text_after_the_last_block_is_kept(
    tmp_path: Path,
) -> None:
    a = blocks.render("hist1_a", "10:00:00", "m", Turn("q", "a", ()))
    base = (blocks.file_header(DAY) + a).encode()
    for tail, cut in [
        (b"## 10:0", len(base)),
        (b"## 10:00:00 \xc2", len(base)),
        (b"## 10:00:00 \xc2\xb7 gpt-4o \xc2\xb7 hist1_b", len(base)),
        (b"## 10:00:00 \xc2\xb7 m \xc2\xb7 hist1_b\n\n**Ass", len(base)),
        (b"## 10:00:00 \xc2\xb7 m \xc2\xb7 hist1_b\n\nmy own notes about it\n", None),  # not shaped like ours
        (b"a person's note\n", None),
    ]:
        assert blocks.blocks(base + tail) == (blocks.blocks(base)[0], cut), tail
    assert blocks.blocks(b"# Sessions 2026-1") == ([], 0)
    assert blocks.blocks(b"# Sessions 2026-11-23\n\n") == ([], None)


def test_a_note_written_after_a_torn_block_before_the_restart_is_kept_and_a_forget_erases_the_turn(
    tmp_path: Path,
) -> None:
    """A crash tears the last block; before the restart a person appends a note at the end of the file. The
    repair cannot tell the note from the torn block, so it cuts both and keeps them in ``.<day>.md.torn``
    (not memory). The proxy retries the torn turn; a forget of it then erases its text there too (from its
    heading to the end of that cut: where a torn block ends cannot be told, and an erasure must be whole)."""
    with session_log() as (log, path):
        a = ("hist1_a", DAY, blocks.render("hist1_a", "10:00:00", "m", Turn("the first question", "yes", ())))
        b = ("hist1_b", DAY, blocks.render("hist1_b", "10:01:00", "m", Turn("the zebra vault code", "1234", ())))
        assert log.write_blocks([a, b]) == ["retained", "retained"]
        data = path.read_bytes()
        os.truncate(path, data.index(b"the zebra vault code") + 9)  # the power went out mid-append
        with path.open("ab") as fh:
            fh.write(b"\n\nNote to self: call Bob about the boiler on Monday.\n")
        fresh = SessionLog(log.agent)
        assert fresh.stats()["retained"] == 1
        kept = path.with_name(f".{path.name}.torn")
        assert b"call Bob about the boiler" in kept.read_bytes() and b"the zebra" in kept.read_bytes()
        assert b"call Bob" not in path.read_bytes() and whole(path.read_bytes()) == ["hist1_a"]
        assert fresh.write_blocks([b]) == ["retained"]  # the proxy's retry
        fresh.forget(["hist1_b"])
        assert b"zebra" not in path.read_bytes() and b"zebra" not in kept.read_bytes()
        assert kept.read_bytes().startswith(b"\n--- cut from the end of 2026-11-23.md at ")
        assert whole(path.read_bytes()) == ["hist1_a"]
