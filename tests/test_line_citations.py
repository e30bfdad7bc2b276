"""One definition of a line (mdmem.util.fileread.split_lines): a line range search cites is the text ``get`` returns
for it, for hand-edited files with CRLF, lone CR, U+2028, NEL, VT or FF, on real files and a real index."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem.files.memory_get import get_file
from mdmem.files.workspace import Workspace
from mdmem.index.chunker import chunk_markdown
from mdmem.memory import Memory
from tests.conftest import write

SEPARATORS = ["\n", "\r\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\n\n", "\r\n\r\n"]
WORDS = ["reindeer", "# Heading", "## Sub", "- item", "```", "| a | b |", "記憶", "text", "    code", ">"]
documents = st.lists(st.one_of(st.sampled_from(SEPARATORS), st.sampled_from(WORDS), st.text(max_size=8)), max_size=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents.map("".join), st.sampled_from([8, 30, 120]))
def test_every_chunk_is_the_text_get_returns_for_its_lines(text: str, tokens: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "MEMORY.md").write_bytes(text.encode("utf-8", "surrogatepass"))
        workspace = Workspace(root)
        for c in chunk_markdown(text, "MEMORY.md", tokens=tokens, overlap=tokens // 4):
            got = get_file(workspace, "MEMORY.md", c.start_line, c.end_line - c.start_line + 1)["text"]
            if c.start_line == c.end_line:
                assert c.text in got  # a slice of a line over the budget, or the whole line
            else:
                assert got == c.text


def test_search_cites_the_lines_get_returns_in_hand_edited_files(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "MEMORY.md", "# Memory\r\n\r\nold mac line\rstill line three: the reindeer count\r\n")
    write(
        workspace / "memory/2026-03-09.md", "# Day\n\nsep\u2028same line\x85also the narwhal line\n\n## Later\n\nend\n"
    )
    mem = make_memory(provider="none")
    for query, path, expected in [
        ("reindeer count", "MEMORY.md", "old mac line\rstill line three: the reindeer count"),
        ("narwhal", "memory/2026-03-09.md", "sep\u2028same line\x85also the narwhal line"),
    ]:
        hit = next(h for h in mem.search(query, min_score=0.0)["results"] if h["path"] == path)
        got = mem.get(path, from_line=hit["startLine"], lines=hit["endLine"] - hit["startLine"] + 1)["text"]
        assert expected in got
        lines = mem.get(path)["text"].split("\n")  # LF lines: what wc -l, grep -n and sed -n count
        assert lines[hit["startLine"] - 1].rstrip("\r") == got.split("\n")[0]
    assert mem.get("MEMORY.md", from_line=3, lines=1)["text"] == "old mac line\rstill line three: the reindeer count"
    assert mem.get("memory/2026-03-09.md", from_line=5, lines=1)["text"] == "## Later"
