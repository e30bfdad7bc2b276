"""The pure middle of replicas without the agent's files: what the index holds of a session day file
(mdmem.files.sessionview), a file's lines rebuilt from its chunks (mdmem.store.lines), which agents a replica
does not hold (mdmem.service.remote) and how a block is appended (mdmem.files.sessionblocks)."""

from __future__ import annotations

import pytest

from mdmem.config.load import is_remote, remote_agents
from mdmem.files import sessionblocks as blocks
from mdmem.files.pending import PendingEntry
from mdmem.files.sessionview import day_of, entry_ids, view
from mdmem.files.turns import Turn
from mdmem.index.chunker import chunk_markdown
from mdmem.store import ChunkRow
from mdmem.store.lines import file_lines, file_text

DAY = "2026-11-23"


def block(eid: str, text: str = "hello") -> str:
    return blocks.render(eid, "14:03:07", "gpt-4o", Turn(f"question {eid}", f"{text} {eid}", ()))


def pending(eid: str, day: str = DAY) -> PendingEntry:
    return PendingEntry(eid, day, block(eid))


HEADER = blocks.file_header(DAY)
A, B, C = block("hist1_a"), block("hist1_b"), block("hist1_c")


@pytest.mark.parametrize(
    ("text", "day", "entries", "forgotten", "expected"),
    [
        ("", DAY, [], [], ""),  # nothing in the database: the file as it is
        (HEADER + A, DAY, [], [], HEADER + A),
        ("", DAY, [pending("hist1_a")], [], HEADER + A),  # no file yet: made as a retain makes it
        (HEADER + A, DAY, [pending("hist1_b")], [], HEADER + A + B),  # a block ends with its blank line
        (HEADER + A, DAY, [pending("hist1_a")], [], HEADER + A),  # in the file already: never twice
        (HEADER + A, DAY, [pending("hist1_b"), pending("hist1_c")], [], HEADER + A + B + C),
        ((HEADER + A).rstrip("\n"), DAY, [pending("hist1_b")], [], HEADER + A + B),  # as rebuilt from chunks
        (HEADER + A, DAY, [pending("hist1_b", "2026-11-24")], [], HEADER + A),  # another day's file
        (HEADER + A + B, DAY, [], ["hist1_a"], HEADER + B),  # a tombstone not applied to the file yet
        (HEADER + A, DAY, [pending("hist1_b")], ["hist1_b"], HEADER + A),  # forgotten before it was written
        (HEADER + A + B[:30], DAY, [pending("hist1_b")], [], HEADER + A + B),  # torn tail: cut, then appended
        (HEADER + A + B, None, [pending("hist1_c")], ["hist1_b"], HEADER + A),  # not a day file: removals only
        ("# notes\n\nno newline at the end", DAY, [pending("hist1_a")], [], "# notes\n\nno newline at the end\n\n" + A),
    ],
)
def test_view(text: str, day: str | None, entries: list[PendingEntry], forgotten: list[str], expected: str) -> None:
    assert view(text, day, entries, forgotten) == expected


def test_view_appends_what_a_retain_appends_to_the_file() -> None:
    on_disk = HEADER + A  # what SessionLog leaves after appending A, then B (joiner: one blank line)
    assert view(on_disk, DAY, [pending("hist1_b")], []) == on_disk + blocks.joiner(on_disk.encode()).decode() + B
    assert entry_ids(view(on_disk, DAY, [pending("hist1_b")], [])) == {"hist1_a", "hist1_b"}


@pytest.mark.parametrize(
    ("rel", "day"),
    [
        ("sessions/2026-11-23.md", "2026-11-23"),
        ("sessions/2026-11-23-notes.md", None),
        ("sessions/x/2026-11-23.md", None),
        ("memory/2026-11-23.md", None),
        ("sessions/2026-11-23.md.bak", None),
    ],
)
def test_day_of(rel: str, day: str | None) -> None:
    assert day_of(rel) == day


def rows(text: str, tokens: int = 64, overlap: int = 16) -> list[ChunkRow]:
    return [
        ChunkRow("f.md", "sessions", c.start_line, c.end_line, c.hash, c.hash, c.heading, c.text, id=i)
        for i, c in enumerate(chunk_markdown(text, "f.md", tokens=tokens, overlap=overlap), start=1)
    ]


@pytest.mark.parametrize(
    "text",
    [
        HEADER + A + B + C,  # several chunks with overlaps
        "# one\n\nline\n",
        "x " * 400 + "\n\nend\n",  # a line over the budget: slices of one line
        "# t\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\ncode\n```\n",
    ],
)
def test_file_lines_rebuild_the_file_from_its_chunks(text: str) -> None:
    chunks = rows(text)
    assert file_text(chunks) == text.rstrip("\n") + "\n"  # blank lines after the last chunk are not kept
    lines = file_lines(chunks)
    for c in chunks:  # what the pack checks: every chunk is in its lines
        assert c.text in "\n".join(lines[c.start_line - 1 : c.end_line])


def test_file_lines_of_no_chunks_is_empty() -> None:
    assert file_lines([]) == [] and file_text([]) == ""


@pytest.mark.parametrize(
    ("configured", "env", "agent", "remote"),
    [
        ((), {}, "main", False),
        (("*",), {}, "main", True),
        (("ops", "main"), {}, "main", True),
        (("ops",), {}, "main", False),
        (("*",), {"MDMEMORY_REMOTE_AGENTS": ""}, "main", False),  # the environment wins, even empty
        ((), {"MDMEMORY_REMOTE_AGENTS": "ops, main"}, "main", True),
        ((), {"MDMEMORY_REMOTE_AGENTS": "*"}, "any", True),
    ],
)
def test_which_agents_a_replica_does_not_hold(
    configured: tuple[str, ...], env: dict[str, str], agent: str, remote: bool
) -> None:
    assert is_remote(agent, remote_agents(configured, env)) is remote


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", ""), ("x\n\n", ""), ("x\n", "\n"), ("x", "\n\n"), ("x\r\n\r\n", ""), ("x\r\n", "\n"), ("x\r", "\n\n")],
)
def test_joiner(text: str, expected: str) -> None:
    assert blocks.joiner(text.encode()) == expected.encode()
    assert blocks.appended(text.encode(), DAY, A).decode() == (text + expected + A if text else HEADER + A)
