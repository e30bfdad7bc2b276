"""What a retain stores and what the service refuses, pure (mdmem.files.retained, contract, telemetry):
time zones, empty entries, the per-message cap and its secrets, wrapping, field types, the recall body a
worker gets, and cllama's ``memory_bytes``."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mdmem.files import sessionblocks as blocks
from mdmem.files.retained import REDACT_MARGIN, WRAP_CHARS, prepare, stored_text, time_zone, wrapped
from mdmem.files.turns import turn_of
from mdmem.service.contract import (
    check_entry,
    check_entry_ids,
    check_metadata,
    check_recall,
    recall_messages,
    recall_query,
)
from mdmem.service.telemetry import injected_bytes
from mdmem.util.errors import InvalidArgumentError
from tests import cllama_shapes as cs
from tests.redaction_corpus import ANTHROPIC, GITHUB, JWT, PROJECT_KEY
from tests.service_bodies import anthropic_entry, openai_entry

# -- time zones -------------------------------------------------------------------------------------------

VALID = ["Europe/Lisbon", "UTC", "EST5EDT", "Etc/GMT+5", "America/Argentina/Buenos_Aires", "Asia/Kolkata"]
INVALID = [
    "Mars/Olympus_Mons",
    "UTC+5",
    "UTC+05:00",
    "+05:00",
    "-0300",
    "GMT-3",
    "Europe",  # a folder of the zone database
    "zone.tab",  # a file in it that is no zone
    "../../etc/passwd",
    "/etc/localtime",
    "Europe/Lisbon\x00",
    "Lisbon",
    "x" * 5000,
]


@pytest.mark.parametrize("name", VALID)
def test_an_iana_name_is_used_without_a_warning(name: str) -> None:
    zone, warning, code = time_zone(name)
    assert str(zone) == name and warning is None and code is None


@pytest.mark.parametrize("name", INVALID)
def test_an_unknown_time_zone_falls_back_to_utc_with_a_warning_naming_the_field(name: str) -> None:
    zone, warning, code = time_zone(name)
    assert zone is UTC and code == "timezone_unknown"
    assert warning is not None and warning.startswith("metadata.timezone:") and "UTC" in warning
    assert "Fix:" in warning and len(warning) < 400  # the value is shown cut, never whole


@pytest.mark.parametrize(
    ("name", "canonical"), [("europe/lisbon", "Europe/Lisbon"), ("AMERICA/NEW_YORK", "America/New_York")]
)
def test_a_name_in_the_wrong_case_is_read_as_the_zone_it_names(name: str, canonical: str) -> None:
    zone, warning, code = time_zone(name)
    assert str(zone) == canonical and code == "timezone_case" and warning and canonical in warning


@pytest.mark.parametrize("name", [None, "", "   "])
def test_no_time_zone_is_utc_without_a_warning(name: str | None) -> None:
    assert time_zone(name) == (UTC, None, None)


def test_a_turn_with_a_bad_time_zone_is_dated_in_utc() -> None:
    entry = openai_entry("when is the standup?", "At 09:30.", ts="2026-11-23T23:30:00Z")
    tokyo = prepare(entry, {"timezone": "Asia/Tokyo"})
    assert (tokyo.day, tokyo.warnings) == ("2026-11-24", ())
    assert tokyo.block.startswith("## 08:30:00 · ")
    bad = prepare(entry, {"timezone": "Mars/Olympus_Mons"})
    assert bad.day == "2026-11-23" and bad.block.startswith("## 23:30:00 · ")
    assert bad.notes == ("timezone_unknown",) and "Mars/Olympus_Mons" in bad.warnings[0]


# -- empty entries ----------------------------------------------------------------------------------------


def _empty_response(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "response": {"format": "json", "json": {"choices": [{"message": {"content": ""}}]}}}


EMPTY = {
    "only ts": {"ts": "2026-11-23T10:00:00Z"},
    "only ts and id": {"ts": "2026-11-23T10:00:00Z", "id": "hist1_x"},
    "no user text, empty answer": _empty_response(
        {**openai_entry("q", "a"), "request_original": {"messages": [{"role": "system", "content": "be brief"}]}}
    ),
    "tool results only": _empty_response(
        {
            **anthropic_entry("q", "a"),
            "request_original": {
                "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]
            },
        }
    ),
    "whitespace only": _empty_response(
        {**openai_entry("q", "a"), "request_original": {"messages": [{"role": "user", "content": " \n\t "}]}}
    ),
    "an injected memory block only": _empty_response(
        {
            **openai_entry("q", "a"),
            "request_original": {
                "messages": [{"role": "user", "content": "--- BEGIN MEMORY (from m) ---\nold\n--- END MEMORY ---"}]
            },
        }
    ),
}


@pytest.mark.parametrize("entry", EMPTY.values(), ids=list(EMPTY))
def test_an_entry_with_nothing_to_retain_is_refused_naming_the_field(entry: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        prepare(check_entry({"entry": entry}), {})
    assert str(err.value).startswith("entry: nothing to retain (entry.") and "Fix:" in str(err.value)


def test_a_turn_with_only_a_user_message_or_only_tool_calls_is_kept() -> None:
    assert "**User:** remember this" in prepare(_empty_response(openai_entry("remember this", "")), {}).block
    tools = openai_entry("", "", tool="search_web")
    tools["request_original"] = {"messages": []}
    block = prepare(tools, {}).block
    assert "_Tool calls: search_web_" in block and "**User:**" not in block


def _with_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {**openai_entry("q", "The answer."), "request_original": {"model": "gpt-4o", "messages": messages}}


TURNS = [
    (
        "one new message",
        [{"role": "user", "content": "old"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "new"}],
        "new",
    ),
    (
        "two in a row",
        [
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "first"},
            {"role": "user", "content": [{"type": "text", "text": "second"}]},
        ],
        "first\n\nsecond",
    ),
    (
        "openai tool loop",
        [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "tool_calls": [{"id": "c"}]},
            {"role": "tool", "content": "result"},
        ],
        "Q",
    ),
    (
        "anthropic tool loop",
        [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": [{"type": "tool_use"}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
        ],
        "Q",
    ),
    ("first turn", [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}], "hello"),
]


@pytest.mark.parametrize(("messages", "user"), [t[1:] for t in TURNS], ids=[t[0] for t in TURNS])
def test_the_turn_is_the_user_messages_since_the_last_answer(messages: list[dict[str, Any]], user: str) -> None:
    assert turn_of(_with_messages(messages)).user == user


# -- the per-message cap ----------------------------------------------------------------------------------


def test_a_message_within_the_cap_is_stored_whole() -> None:
    text = "intro. " * 3000 + "The spare key is under the blue flowerpot."
    stored, cut = stored_text(text, 256 * 1024)
    assert cut is None and " ".join(stored.split()) == " ".join(text.split())


def test_a_message_over_the_cap_keeps_its_start_and_end_and_says_what_was_cut() -> None:
    text = "START " + "filler words here. " * 20_000 + "The drone is in locker 88."
    stored, cut = stored_text(text, 20_000)
    assert cut == (len(text), 15_000, 5_000)
    assert stored.startswith("START ") and stored.endswith("The drone is in locker 88.")
    assert f"{len(text) - 20_000:,} characters cut here" in stored and "service.maxMessageChars (20,000)" in stored
    assert 20_000 < len(stored) < 20_300


@pytest.mark.parametrize("secret", [PROJECT_KEY, GITHUB, ANTHROPIC, JWT, "Bearer " + "kQ9x" * 12])
@pytest.mark.parametrize("edge", ["head", "tail"])
def test_a_cut_never_keeps_part_of_a_secret(secret: str, edge: str) -> None:
    """A secret across either end of what a cut message keeps becomes its marker, at every offset."""
    limit = 4000
    head, tail = 3000, 1000
    for shift in range(-len(secret) - 1, 2):
        filler = "word " * 2000
        if edge == "head":
            at = head + shift  # the secret starts this far from the end of the kept start
            text = filler[:at] + " " + secret + " " + filler
        else:
            text = filler + " " + secret + " " + filler[: tail + shift]
        stored, cut = stored_text(text, limit)
        assert cut is not None
        core = secret.removeprefix("Bearer ")
        for n in range(8, len(core) + 1, 4):  # no 8 characters of it in a row
            assert not any(core[i : i + n] in stored for i in range(0, len(core) - n + 1, 3)), (edge, shift)


def test_secrets_far_from_the_cut_are_redacted_and_the_middle_is_never_read() -> None:
    text = PROJECT_KEY + " " + "x " * 200_000 + GITHUB
    start = time.perf_counter()
    stored, cut = stored_text(text, 10_000)
    assert time.perf_counter() - start < 2.0  # the 400 KB between is skipped, not redacted
    assert cut is not None and PROJECT_KEY not in stored and GITHUB not in stored
    assert stored.count("[REDACTED:") == 2
    assert REDACT_MARGIN < 200_000


def test_each_part_is_capped_and_listed() -> None:
    entry = openai_entry("u" * 30 + " " + "question words " * 3000, "answer words " * 4000, tool="lookup")
    p = prepare(entry, {}, max_chars=10_000)
    assert [c.part for c in p.cuts] == ["user", "assistant"]
    assert p.notes == ("truncated_user", "truncated_assistant")
    assert all("service.maxMessageChars (10,000)" in w for w in p.warnings)
    rendered = blocks.read_block(p.block.encode(), blocks.blocks(p.block.encode())[0][0])
    assert len(rendered.turn.user) < 10_300 and len(rendered.turn.assistant) < 10_300


# -- wrapping long lines ----------------------------------------------------------------------------------

WORDS = st.sampled_from(["Ops", "moved", "the", "job.", "Then", "-", "1.", ">", "#", "|", "the", "key!", "é", "東京。"])
BLOCK_START = re.compile(r"[-+*>#=|]|\d{1,9}[.)](?:[ \t]|$)|`{3}|~{3}")  # what Markdown reads as a new block
LINES = st.lists(WORDS, min_size=1, max_size=400).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(LINES)
@example(" ".join(["word"] * 20 + ["job.", "-", "item", "done.", "1.", "step", "ok!", ">", "quote"] * 30))
def test_wrapping_keeps_every_word_and_never_starts_another_block(line: str) -> None:
    pieces = wrapped(line, 120).split("\n")
    assert " ".join(pieces).split() == line.split()  # only runs of spaces became line breaks
    assert pieces[0] == line[: len(pieces[0])]
    for piece in pieces[1:]:  # a list item, quote, heading or table row would change what Markdown shows
        assert BLOCK_START.match(piece) is None, piece[:20]
    assert all(len(p) <= 2 * 120 for p in pieces[:-1])


def test_code_and_tables_are_never_wrapped() -> None:
    code = "x = 1  # " + "comment words " * 100
    table = "| " + " | ".join(["cell words here"] * 60) + " |"
    indented = "    " + "indented code " * 100
    text = "\n".join(["intro", "```python", code, "```", table, indented, "~~~", code, "~~~"])
    assert wrapped(text, 120) == text
    prose = "words " * 100
    assert wrapped(f"```\n{code}\n```\n{prose}", 120).count("\n") > 3  # prose after the fence is wrapped


def test_a_long_paragraph_is_wrapped_near_sentence_ends() -> None:
    sentence = "The quarterly planning meeting moved to Thursday afternoon (room 4). "
    out = wrapped(sentence * 60)
    lines = out.split("\n")
    assert len(lines) > 4 and all(line.rstrip().endswith(").") for line in lines)
    assert all(WRAP_CHARS / 2 <= len(line) <= 2 * WRAP_CHARS for line in lines[:-1])


def test_cjk_text_without_spaces_and_long_tokens() -> None:
    assert all(len(line) <= WRAP_CHARS for line in wrapped("東京の天気" * 400).split("\n"))
    blob = "A" * 3000  # a URL, a base64 blob: never cut, the line ends at the space after it
    assert wrapped(f"see {blob} there") == f"see {blob}\nthere"


# -- wrong types, naming the field --------------------------------------------------------------------------

BAD_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("recall", {"messages": "nope"}, "messages"),
    ("recall", {"messages": {"role": "user"}}, "messages"),
    ("recall", {"system": 5}, "system"),
    ("recall", {"metadata": "x"}, "metadata"),
    ("recall", {"metadata": ["x"]}, "metadata"),
    ("recall", {"metadata": {"timezone": 5}}, "metadata.timezone"),
    ("recall", {"metadata": {"service": ["m"]}}, "metadata.service"),
    ("recall", {"pod": 7}, "pod"),
    ("retain", {"entry": "x"}, "entry"),
    ("retain", {"entry": ["x"]}, "entry"),
    ("retain", {}, "entry"),
    ("retain", {"entry": {**openai_entry("q", "a"), "stream": "yes"}}, "entry.stream"),
    ("retain", {"entry": {**openai_entry("q", "a"), "status_code": "200"}}, "entry.status_code"),
    ("retain", {"entry": {**openai_entry("q", "a"), "version": 1.5}}, "entry.version"),
    ("retain", {"entry": {**openai_entry("q", "a"), "effective_model": 4}}, "entry.effective_model"),
    ("retain", {"entry": {**openai_entry("q", "a"), "request_original": "x"}}, "entry.request_original"),
    ("retain", {"entry": {**openai_entry("q", "a"), "response": [1]}}, "entry.response"),
    ("retain", {"entry": {**openai_entry("q", "a"), "response": {"format": "sse", "text": 5}}}, "entry.response.text"),
    ("retain", {"entry": {**openai_entry("q", "a"), "usage": "many"}}, "entry.usage"),
    ("retain", {"entry": {**openai_entry("q", "a"), "usage": {"prompt_tokens": "3"}}}, "entry.usage.prompt_tokens"),
    ("retain", {"entry": {**openai_entry("q", "a"), "tool_trace": {}}}, "entry.tool_trace"),
    ("retain", {"entry": openai_entry("q", "a"), "metadata": {"policy_removed": "2"}}, "metadata.policy_removed"),
    ("forget", {"entry_ids": "hist1_x"}, "entry_ids"),
    ("forget", {"entry_ids": [1]}, "entry_ids[0]"),
    ("forget", {"entry_ids": ["hist1_x"], "reason": 3}, "reason"),
]


def _check(op: str, body: dict[str, Any]) -> None:
    check_metadata(body)
    if op == "recall":
        check_recall(body)
    elif op == "retain":
        check_entry(body)
    else:
        check_entry_ids(body)


@pytest.mark.parametrize(("op", "body", "field"), BAD_TYPES, ids=[f"{b[0]}-{b[2]}" for b in BAD_TYPES])
def test_a_wrong_type_is_refused_naming_the_field(op: str, body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        _check(op, {"agent_id": "main", **body})
    assert str(err.value).startswith(field + ":"), str(err.value)


def test_provider_payloads_stay_tolerant() -> None:
    """Parts that vary by provider are read as absent when their shape is unexpected, never refused."""
    entry = openai_entry("which port?", "8443.")
    entry["request_original"] = {
        "messages": ["odd", {"role": "user", "content": [{"type": "image"}, 5, "which port?"]}]
    }
    entry["response"] = {"format": "json", "json": {"choices": "odd", "content": [{"type": "text", "text": "8443."}]}}
    check_entry({"entry": entry})
    check_recall({"messages": ["odd", {"role": "user", "content": {"weird": 1}}], "system": [{"type": "text"}]})
    assert turn_of(entry).user == "which port?"


# -- what a recall worker gets of a long conversation ------------------------------------------------------

MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"])},
    optional={
        "content": st.text(max_size=60)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=30)}))
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE | st.integers(), max_size=12))
def test_the_end_of_a_conversation_gives_the_same_recall_query(messages: list[Any]) -> None:
    assert recall_query({"messages": recall_messages(messages)}) == recall_query({"messages": messages})


def test_memory_blocks_are_stripped_in_linear_time() -> None:
    text = "--- BEGIN MEMORY (from m) --- " * 40_000 + "the real question"
    start = time.perf_counter()
    body = {"messages": [{"role": "user", "content": text}]}
    assert recall_query(body).endswith("the real question")
    assert time.perf_counter() - start < 1.0


# -- telemetry's memory_bytes is cllama's ------------------------------------------------------------------

MEMORY = st.fixed_dictionaries(
    {"text": st.text(max_size=3000), "kind": st.sampled_from(["session", "daily", "transcript_tail", ""])},
    optional={
        "score": st.floats(0, 1),
        "source": st.sampled_from(["sessions", "memory", "raw_transcript"]),
        "ts": st.sampled_from(["2026-11-23", ""]),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MEMORY, max_size=10), st.sampled_from(["mdmem", "memory-svc", ""]))
def test_memory_bytes_is_the_length_of_the_block_cllama_injects(memories: list[dict[str, Any]], service: str) -> None:
    kept, _ = cs.apply_recall_memory_policy(json.loads(json.dumps(memories)))
    assert injected_bytes(memories, service) == len(cs.format_memory_blocks(service, kept).encode())
