"""Tests for the Markdown chunker: exact line ranges, block-aware boundaries, overlap, heading paths,
long lines, CJK and no text lost."""

from __future__ import annotations

import hashlib
import random
import time
from collections import defaultdict

import pytest

from mdmem.index.chunker import Chunk, chunk_markdown
from mdmem.util.fileread import split_lines
from mdmem.util.tokens import TokenCounter, estimate_tokens

WORDS = "memory agent sqlite vector search index chunk embed provider watcher hybrid keyword".split()


def editor_lines(text: str) -> list[str]:
    return split_lines(text)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def check_chunks(
    text: str,
    chunks: list[Chunk],
    *,
    tokens: int = 400,
    overlap: int = 80,
    count: TokenCounter = estimate_tokens,
    path: str = "MEMORY.md",
) -> None:
    """Every invariant of the chunker contract, including that no non-blank text is lost."""
    lines = editor_lines(text)
    covered: set[int] = set()
    pieces: dict[int, list[str]] = defaultdict(list)
    prev: Chunk | None = None
    prev_normal = False
    for c in chunks:
        assert c.path == path
        assert c.hash == sha(c.text)
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.text.strip(), "whitespace-only chunk"
        assert count(c.text) <= tokens, (c, count(c.text))
        normal = c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        if normal:
            assert lines[c.start_line - 1].strip() and lines[c.end_line - 1].strip(), "blank edge line"
            covered.update(range(c.start_line, c.end_line + 1))
        else:
            assert c.start_line == c.end_line, f"text does not match lines {c.start_line}-{c.end_line}"
            assert c.text in lines[c.start_line - 1]
            pieces[c.start_line].append(c.text)
        if prev is not None:
            if normal and prev_normal:
                assert prev.start_line < c.start_line, "overlap took the whole previous chunk"
                assert prev.end_line < c.end_line, "chunk contained in the previous one"
                if c.start_line <= prev.end_line:
                    shared = "\n".join(lines[c.start_line - 1 : prev.end_line])
                    assert count(shared) <= min(overlap, tokens // 2)
            elif normal or prev_normal:
                assert c.start_line > prev.end_line
            else:
                assert c.start_line >= prev.end_line
        prev, prev_normal = c, normal
    for line_no, parts in pieces.items():
        assert "".join(parts) == lines[line_no - 1], f"long line {line_no} not reassembled"
        covered.add(line_no)
    lost = [i for i, line in enumerate(lines, 1) if line.strip() and i not in covered]
    assert not lost, f"lines never chunked: {lost}"


def fence_lines(n: int) -> list[str]:
    return ["```python"] + [f"value_{i} = compute(item_{i}, scale={i})  # step {i}" for i in range(n)] + ["```"]


def prose(rng: random.Random, n_lines: int, words: int = 12) -> list[str]:
    """Paragraphs of two lines separated by blank lines."""
    out: list[str] = []
    for i in range(n_lines):
        if i and i % 2 == 0:
            out.append("")
        out.append(sentence(rng, words))
    return out


MIXED = """# Projects

Intro to the projects, kept short.

## mdmem

The index lives in SQLite.
It uses sqlite-vec and FTS5.

- item one
- item two
  - nested item
- item three

```python
def search(q):
    return hybrid(q)
```

| key | value |
|-----|-------|
| a   | 1     |
| b   | 2     |

> a quote
> on two lines

Setext Title
============

Body under the setext title.

Subsection
----------

    indented code
    more code

<div>
raw html
</div>

[ref]: https://example.com

Last paragraph.
"""


# ---------------------------------------------------------------- basics


def test_whole_object_for_a_small_document() -> None:
    text = "# Title\n\nHello world.\n"
    assert chunk_markdown(text, "MEMORY.md") == [
        Chunk("MEMORY.md", 1, 3, "# Title\n\nHello world.", sha("# Title\n\nHello world."), "Title")
    ]


@pytest.mark.parametrize("text", ["", "\n", "   \n\t\n  ", "\r\n\r\n"])
def test_empty_and_whitespace_input(text: str) -> None:
    assert chunk_markdown(text, "MEMORY.md") == []


def test_blank_lines_are_trimmed_and_final_newline_adds_no_line() -> None:
    chunks = chunk_markdown("\n\n  \nhello\nworld\n\n\n", "memory/2024-05-01.md")
    assert [(c.start_line, c.end_line, c.text, c.path) for c in chunks] == [
        (4, 5, "hello\nworld", "memory/2024-05-01.md")
    ]


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="tokens"):
        chunk_markdown("x", "a.md", tokens=0)
    with pytest.raises(ValueError, match="overlap"):
        chunk_markdown("x", "a.md", overlap=-1)


@pytest.mark.parametrize(("tokens", "overlap"), [(400, 80), (40, 10), (15, 5), (25, 0)])
def test_join_invariant_on_mixed_document(tokens: int, overlap: int) -> None:
    chunks = chunk_markdown(MIXED, "MEMORY.md", tokens=tokens, overlap=overlap)
    assert chunks
    check_chunks(MIXED, chunks, tokens=tokens, overlap=overlap)


def test_crlf_reads_like_lf_and_only_lf_ends_a_line() -> None:
    lf = chunk_markdown(MIXED, "MEMORY.md", tokens=40, overlap=10)
    crlf_text = MIXED.replace("\n", "\r\n")
    crlf = chunk_markdown(crlf_text, "MEMORY.md", tokens=40, overlap=10)
    assert crlf == lf
    check_chunks(crlf_text, crlf, tokens=40, overlap=10)
    assert all("\r" not in c.text for c in crlf)
    # a lone CR (or U+2028, NEL, VT, FF) is a character of its line, as wc -l, grep -n and memory_get count
    assert [(c.start_line, c.end_line, c.text) for c in chunk_markdown("a\rb\r\nc", "a.md")] == [(1, 2, "a\rb\nc")]
    for sep in ("\r", "\u2028", "\x85", "\x0b", "\x0c"):
        text = f"intro\n\nplain text{sep}# not a heading\n\n# Real\n\nbody"
        chunks = chunk_markdown(text, "a.md", tokens=8, overlap=0)
        check_chunks(text, chunks, tokens=8, overlap=0, path="a.md")
        assert [c.heading for c in chunks if c.start_line == 5] == ["Real"]  # line 5 of 7, counted on LF only
        assert all(c.heading != "not a heading" for c in chunks)


# ---------------------------------------------------------------- blocks kept intact


def blocks_intact(chunks: list[Chunk], first: int, last: int) -> list[Chunk]:
    """Chunks touching lines first..last (1-based); asserts none of them holds only part of it."""
    touching = [c for c in chunks if c.start_line <= last and c.end_line >= first]
    for c in touching:
        assert c.start_line <= first and c.end_line >= last, f"block {first}-{last} split by {c}"
    return touching


@pytest.mark.parametrize("fence_size", [25, 32])  # ~300 and ~390 tokens
def test_fence_near_a_boundary_is_not_split(fence_size: int) -> None:
    rng = random.Random(1)
    before = prose(rng, 12)  # ~250 tokens: the fence cannot fit after it
    fence = fence_lines(fence_size)
    assert 290 <= estimate_tokens("\n".join(fence)) <= 400
    text = "\n".join(before + [""] + fence + [""] + prose(rng, 16)) + "\n"
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    first = len(before) + 2
    assert len(blocks_intact(chunks, first, first + len(fence) - 1)) >= 1


def test_table_near_a_boundary_is_not_split() -> None:
    rng = random.Random(2)
    before = prose(rng, 16)
    table = ["| name | role | notes |", "|---|---|---|"]
    table += [f"| person {i} | {sentence(rng, 2)} | {sentence(rng, 4)} |" for i in range(22)]
    assert estimate_tokens("\n".join(table)) > 250
    text = "\n".join(before + [""] + table + [""] + prose(rng, 16))
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    first = len(before) + 2
    assert len(blocks_intact(chunks, first, first + len(table) - 1)) >= 1


def test_huge_fence_is_split_between_lines_with_overlap() -> None:
    fence = fence_lines(150)  # ~1700 tokens
    text = "Some intro.\n\n" + "\n".join(fence) + "\n\nAfter the code.\n"
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    inside = [c for c in chunks if c.start_line <= 3 + len(fence) - 1 and c.end_line >= 3]
    assert len(inside) >= 4
    assert all(estimate_tokens(c.text) <= 400 for c in inside)
    assert all(b.start_line <= a.end_line for a, b in zip(inside, inside[1:], strict=False))


def test_overlap_never_starts_inside_a_fence() -> None:
    rng = random.Random(3)
    fence = fence_lines(12)
    text = "\n".join(prose(rng, 4) + [""] + fence + [""] + prose(rng, 30))
    chunks = chunk_markdown(text, "MEMORY.md", tokens=200, overlap=60)
    check_chunks(text, chunks, tokens=200, overlap=60)
    first = 4 + 2 + 1  # 4 prose lines, one blank between paragraphs, one before the fence
    blocks_intact(chunks, first, first + len(fence) - 1)
    assert not any(first < c.start_line <= first + len(fence) - 1 for c in chunks)


# ---------------------------------------------------------------- boundaries and overlap


def test_heading_is_the_preferred_boundary() -> None:
    rng = random.Random(4)
    first = ["# Notes", ""] + prose(rng, 14)  # ~220 tokens
    second = ["## Second", ""] + prose(rng, 14)
    text = "\n".join(first + [""] + second)
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    heading_line = len(first) + 2
    assert chunks[0].start_line == 1
    assert chunks[0].end_line == len(first)
    assert chunks[1].start_line == heading_line  # starts at the heading, no overlap
    assert chunks[1].heading == "Notes > Second"


def test_heading_is_not_taken_when_it_leaves_the_chunk_less_than_half_full() -> None:
    rng = random.Random(5)
    text = "\n".join(["# Notes", "", sentence(rng, 10), "", "## Long", ""] + prose(rng, 60))
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    assert chunks[0].start_line == 1
    assert chunks[0].end_line > 5
    assert estimate_tokens(chunks[0].text) > 300


def test_chunk_does_not_end_with_a_dangling_heading() -> None:
    para_a = "a" * 183  # 46 tokens with its newline
    heading = "## B heading words"  # 5 tokens
    text = "\n".join(["# A", "", para_a, "", heading, "", "b" * 240])
    assert estimate_tokens("# A\n") + estimate_tokens(para_a + "\n") < 50  # heading below half full
    chunks = chunk_markdown(text, "MEMORY.md", tokens=100, overlap=20)
    check_chunks(text, chunks, tokens=100, overlap=20)
    # Breaking after the heading would fill the chunk more, but would strand the heading.
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 3, "A"),
        (5, 7, "A > B heading words"),
    ]


def test_overlap_does_not_reach_back_over_a_heading() -> None:
    rng = random.Random(17)
    top = ["# A", ""] + prose(rng, 8) + ["", "## B", "short line in B"]
    fence = fence_lines(24)  # ~290 tokens: does not fit after A's text
    text = "\n".join(top + [""] + fence)
    chunks = chunk_markdown(text, "MEMORY.md", tokens=400, overlap=80)
    check_chunks(text, chunks, tokens=400, overlap=80)
    heading_line = len(top) - 1
    assert len(chunks) == 2
    assert chunks[0].end_line == len(top)
    assert chunks[1].start_line == heading_line  # overlap is "## B" + one line, not A's text
    assert chunks[1].heading == "A > B"


def test_breaks_at_paragraph_ends_rather_than_mid_paragraph() -> None:
    rng = random.Random(6)
    paragraphs = ["\n".join(sentence(rng, 12) for _ in range(5)) for _ in range(20)]
    text = "\n\n".join(paragraphs)
    lines = editor_lines(text)
    chunks = chunk_markdown(text, "MEMORY.md", tokens=200, overlap=40)
    check_chunks(text, chunks, tokens=200, overlap=40)
    assert len(chunks) > 5
    for c in chunks[:-1]:
        assert lines[c.end_line] == "", f"chunk ends mid-paragraph at line {c.end_line}"


def test_overlap_shares_trailing_lines_within_budget() -> None:
    rng = random.Random(7)
    text = "\n".join(sentence(rng, 8) for _ in range(80))  # one long paragraph, ~12 tokens a line
    lines = editor_lines(text)
    chunks = chunk_markdown(text, "MEMORY.md", tokens=100, overlap=30)
    check_chunks(text, chunks, tokens=100, overlap=30)
    assert len(chunks) > 8
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert a.start_line < b.start_line <= a.end_line < b.end_line
        shared = "\n".join(lines[b.start_line - 1 : a.end_line])
        assert b.text.startswith(shared) and a.text.endswith(shared)
        assert estimate_tokens(shared) <= 30


def test_zero_overlap_shares_nothing() -> None:
    rng = random.Random(8)
    text = "\n".join(sentence(rng, 8) for _ in range(80))
    chunks = chunk_markdown(text, "MEMORY.md", tokens=100, overlap=0)
    check_chunks(text, chunks, tokens=100, overlap=0)
    assert all(b.start_line == a.end_line + 1 for a, b in zip(chunks, chunks[1:], strict=False))


# ---------------------------------------------------------------- heading paths


def test_heading_paths_nested_setext_and_siblings() -> None:
    rng = random.Random(9)
    filler = sentence(rng, 16)  # ~25 tokens: one section per 40-token chunk
    sections = [
        "# Projects",
        "## The `mdmem` **tool**",
        "### Chunker",
        "## Other",
        "Setext Title\n============",
        "Sub\n---",
        "#### Deep",
        "## Back",
    ]
    text = "\n\n".join(f"{h}\n\n{filler}" for h in sections)
    chunks = chunk_markdown(text, "MEMORY.md", tokens=40, overlap=10)
    check_chunks(text, chunks, tokens=40, overlap=10)
    assert [c.heading for c in chunks] == [
        "Projects",
        "Projects > The mdmem tool",
        "Projects > The mdmem tool > Chunker",
        "Projects > Other",
        "Setext Title",
        "Setext Title > Sub",
        "Setext Title > Sub > Deep",
        "Setext Title > Back",
    ]
    assert all(c.text.startswith(h) for c, h in zip(chunks, sections, strict=True))


def test_chunk_starting_mid_section_inherits_the_path() -> None:
    rng = random.Random(10)
    top = ["# Projects", "", "## mdmem", ""] + prose(rng, 80) + [""]
    text = "\n".join(top + ["# Next", ""] + prose(rng, 40))
    next_line = len(top) + 1
    chunks = chunk_markdown(text, "MEMORY.md")
    check_chunks(text, chunks)
    assert chunks[0].heading == "Projects"  # starts at "# Projects"
    mid_section = [c for c in chunks[1:] if c.start_line < next_line]
    assert len(mid_section) >= 3
    assert all(c.heading == "Projects > mdmem" and not c.text.startswith("#") for c in mid_section)
    later = [c for c in chunks if c.start_line >= next_line]
    assert len(later) >= 2 and all(c.heading == "Next" for c in later)


def test_headings_inside_quotes_and_front_matter_are_not_headings() -> None:
    rng = random.Random(11)
    text = "\n".join(["---", "title: journal", "tags: [a, b]", "---", "> # Quoted", "", "# Real", ""] + prose(rng, 40))
    chunks = chunk_markdown(text, "MEMORY.md", tokens=80, overlap=20)
    check_chunks(text, chunks, tokens=80, overlap=20)
    assert chunks[0].heading == ""
    assert {c.heading for c in chunks} == {"", "Real"}


# ---------------------------------------------------------------- long lines


def test_long_line_is_split_at_whitespace_without_loss() -> None:
    rng = random.Random(12)
    long_line = sentence(rng, 3000)
    text = f"# Log\n\nbefore\n{long_line}\nafter\n"
    chunks = chunk_markdown(text, "MEMORY.md", tokens=200, overlap=40)
    check_chunks(text, chunks, tokens=200, overlap=40)
    parts = [c for c in chunks if c.start_line == 4]
    assert len(parts) > 10 and all(c.end_line == 4 and c.heading == "Log" for c in parts)
    assert "".join(c.text for c in parts) == long_line
    assert all(c.text.endswith(" ") for c in parts[:-1])
    assert all(estimate_tokens(c.text) > 150 for c in parts[:-1])  # pieces are not tiny


@pytest.mark.parametrize("kind", ["words", "no-spaces"])
def test_two_megabyte_single_line(kind: str) -> None:
    rng = random.Random(13)
    if kind == "words":
        line = " ".join(rng.choice(WORDS) for _ in range(300_000))[:2_000_000]
    else:
        line = "".join(rng.choices("0123456789abcdef", k=2_000_000))
    started = time.perf_counter()
    chunks = chunk_markdown(line, "MEMORY.md")
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0
    assert "".join(c.text for c in chunks) == line
    assert all(c.start_line == c.end_line == 1 and estimate_tokens(c.text) <= 400 for c in chunks)
    assert len(chunks) < 2_000_000 / 4 / 400 * 1.2  # pieces close to the budget


def test_one_megabyte_document_is_fast() -> None:
    rng = random.Random(14)
    blocks: list[str] = []
    size = 0
    while size < 1_000_000:
        kind = rng.random()
        if kind < 0.1:
            block = f"## {sentence(rng, 3)}"
        elif kind < 0.2:
            block = "\n".join(fence_lines(rng.randint(3, 20)))
        elif kind < 0.35:
            block = "\n".join(f"- {sentence(rng, 8)}" for _ in range(rng.randint(2, 8)))
        else:
            block = "\n".join(sentence(rng, 12) for _ in range(rng.randint(1, 5)))
        blocks.append(block)
        size += len(block) + 2
    text = "\n\n".join(blocks)
    started = time.perf_counter()
    chunks = chunk_markdown(text, "MEMORY.md")
    assert time.perf_counter() - started < 2.0
    check_chunks(text, chunks)


# ---------------------------------------------------------------- CJK and token counters


def test_cjk_token_estimate() -> None:
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("abcd") == 1


def test_chinese_document_gets_more_chunks_than_ascii_of_the_same_length() -> None:
    rng = random.Random(15)
    han = "记忆代理索引向量搜索关键词混合嵌入文件每日日志项目"
    cjk_text = "\n".join("".join(rng.choice(han) for _ in range(30)) + "。" for _ in range(60))
    ascii_text = "\n".join(sentence(rng, 6)[:30].ljust(30, "x") + "." for _ in range(60))
    assert len(cjk_text) == len(ascii_text)
    cjk = chunk_markdown(cjk_text, "memory/2024-01-01.md", tokens=100, overlap=20)
    ascii_chunks = chunk_markdown(ascii_text, "memory/2024-01-01.md", tokens=100, overlap=20)
    check_chunks(cjk_text, cjk, tokens=100, overlap=20, path="memory/2024-01-01.md")
    check_chunks(ascii_text, ascii_chunks, tokens=100, overlap=20, path="memory/2024-01-01.md")
    assert len(cjk) > 2 * len(ascii_chunks)


def test_long_cjk_line_without_spaces_is_split_at_punctuation() -> None:
    rng = random.Random(16)
    han = "记忆代理索引向量搜索关键词混合嵌入文件每日日志项目"
    line = "".join("".join(rng.choice(han) for _ in range(19)) + "。" for _ in range(100))
    chunks = chunk_markdown(line, "MEMORY.md", tokens=100, overlap=20)
    check_chunks(line, chunks, tokens=100, overlap=20)
    assert len(chunks) >= 20
    assert all(c.text.endswith("。") for c in chunks)


def test_custom_token_counter_is_used() -> None:
    calls: list[str] = []

    def words(text: str) -> int:
        calls.append(text)
        return len(text.split())

    long_words = ["supercalifragilistic", "antidisestablishment", "floccinaucinihilipil"]
    text = "\n".join(" ".join(long_words) for _ in range(30))  # ~16 estimated tokens, 3 words a line
    chunks = chunk_markdown(text, "MEMORY.md", tokens=10, overlap=3, count_tokens=words)
    assert calls
    check_chunks(text, chunks, tokens=10, overlap=3, count=words)
    # With the default estimate every line is over 10 tokens and would be cut mid-line.
    # 3 lines of 3 words, then a 1-line overlap and 2 new lines each time.
    assert [(c.start_line, c.end_line) for c in chunks] == [(i, i + 2) for i in range(1, 28, 2)] + [(29, 30)]


# ---------------------------------------------------------------- property: no text lost


def random_markdown(rng: random.Random) -> str:
    def block() -> str:
        kind = rng.randrange(14)
        if kind == 0:
            return "#" * rng.randint(1, 6) + " " + sentence(rng, rng.randint(0, 4))
        if kind == 1:
            return sentence(rng, 3) + "\n" + rng.choice("=-") * rng.randint(1, 6)
        if kind == 2:
            marker = rng.choice(["```", "~~~", "````"])
            body = [sentence(rng, rng.randint(0, 10)) for _ in range(rng.randint(0, 40))]
            closing = [marker] if rng.random() < 0.9 else []
            return "\n".join([marker + rng.choice(["", "py"])] + body + closing)
        if kind == 3:
            rows = [f"| {sentence(rng, 2)} | {sentence(rng, 3)} |" for _ in range(rng.randint(0, 20))]
            return "\n".join(["| a | b |", "|---|:-:|"] + rows)
        if kind == 4:
            items = []
            for _ in range(rng.randint(1, 15)):
                indent = "  " * rng.randint(0, 2)
                items.append(f"{indent}{rng.choice(['-', '*', '1.'])} {sentence(rng, rng.randint(1, 15))}")
            return ("\n\n" if rng.random() < 0.3 else "\n").join(items)
        if kind == 5:
            return "\n".join("> " + sentence(rng, rng.randint(0, 10)) for _ in range(rng.randint(1, 6)))
        if kind == 6:
            return "\n".join("    " + sentence(rng, 5) for _ in range(rng.randint(1, 8)))
        if kind == 7:
            return "<div>\n" + sentence(rng, 5) + "\n</div>"
        if kind == 8:
            return sentence(rng, rng.randint(50, 800))  # one long line
        if kind == 9:
            han = "记忆代理索引向量搜索关键词"
            return "".join(rng.choice(han + "。，") for _ in range(rng.randint(5, 600)))
        if kind == 10:
            return rng.choice(["---", "***", "   ", "\t", "[x]: http://example.com"])
        return "\n".join(sentence(rng, rng.randint(1, 20)) for _ in range(rng.randint(1, 8)))

    parts = []
    if rng.random() < 0.1:
        parts.append("---\ntitle: t\n---")
    parts += [block() for _ in range(rng.randint(0, 25))]
    text = "".join(p + rng.choice(["\n", "\n\n", "\n\n\n", "\n \n"]) for p in parts)
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.5:
        text = text.rstrip("\r\n")
    return text


def test_no_text_lost_on_random_markdown() -> None:
    rng = random.Random(20240501)
    counters: list[TokenCounter] = [estimate_tokens, len, lambda t: len(t.split())]
    for i in range(300):
        text = random_markdown(rng)
        tokens = rng.choice([12, 30, 60, 120, 250, 400])
        overlap = rng.randint(0, tokens)
        count = counters[i % 3]
        chunks = chunk_markdown(text, "MEMORY.md", tokens=tokens, overlap=overlap, count_tokens=count)
        check_chunks(text, chunks, tokens=tokens, overlap=overlap, count=count)
