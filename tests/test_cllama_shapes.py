"""tests/cllama_shapes.py rebuilds cllama's memory bodies byte for byte: checked against real recordings.

The fixtures (tests/fixtures/cllama/*.json) were recorded by running the real cllama binary in front of
`mdmem serve` and a fake upstream (the harness described in tests/cllama_shapes.py's docstring): each
holds the agent's request as sent, the upstream's request and reply as exchanged, cllama's history line,
and the exact recall and retain bodies cllama sent. Their secrets are made up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import cllama_shapes as cs
from tests import cllama_usage, gojson
from tests import provider_shapes as ps

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "cllama").glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _api(f: dict[str, Any]) -> str:
    return "anthropic" if json.loads(f["history_line"])["path"] == "/v1/messages" else "openai"


def _entry(f: dict[str, Any]) -> cs.Entry:
    line = json.loads(f["history_line"])
    provider, model, sse = line["effective_provider"], line["effective_model"], line["stream"]
    return cs.Entry(
        ts=line["ts"],
        claw_id=f["agent_id"],
        path=line["path"],
        requested_model=line["requested_model"],
        effective_provider=provider,
        effective_model=model,
        request_original=f["request_original"].encode(),
        request_effective=f["request_effective"].encode(),
        response=f["response"].encode(),
        stream=sse,
        usage=cllama_usage.usage_for(provider, model, f["response"].encode(), sse),
    )


def test_fixtures_cover_both_providers_and_formats() -> None:
    cases = {_load(p)["case"] for p in FIXTURES}
    assert {"openai-json", "openai-sse", "anthropic-json", "anthropic-sse"} <= cases, cases


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_recall_body_is_cllamas(path: Path) -> None:
    f = _load(path)
    body = cs.recall_body(f["agent_id"], f["agent_metadata"], _api(f), json.loads(f["request_original"]))
    assert body.decode() == f["recall_body"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_history_line_and_entry_id_are_cllamas(path: Path) -> None:
    f = _load(path)
    entry = _entry(f)
    assert entry.ensure_id() == json.loads(f["history_line"])["id"]
    assert entry.history_line().decode() == f["history_line"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_retain_body_is_cllamas(path: Path) -> None:
    f = _load(path)
    body = cs.retain_body(f["agent_id"], f["agent_metadata"], _entry(f))
    assert body.decode() == f["retain_body"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_upstream_request_is_cllamas(path: Path) -> None:
    f = _load(path)
    line = json.loads(f["history_line"])
    built = cs.effective_request(
        json.loads(f["request_original"]), _api(f), line["effective_model"], f["runtime_context"]
    )
    assert built.decode() == f["request_effective"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_injected_memory_is_formatted_as_cllama_does(path: Path) -> None:
    f = _load(path)
    if f["recall_response"] is None:  # cllama gave up on this recall (its 300 ms budget): nothing injected
        assert f["injected_memory"] == ""
        return
    kept, _ = cs.apply_recall_memory_policy(json.loads(f["recall_response"])["memories"])
    block = cs.format_memory_blocks(f["memory_service"], kept)
    assert block == f["injected_memory"]
    assert len(block.encode()) == f["recall_log"]["memory_bytes"]


def test_turn_builds_both_bodies_from_a_request_and_a_reply() -> None:
    f = _load(next(p for p in FIXTURES if p.stem == "anthropic-sse"))
    line = json.loads(f["history_line"])
    t = cs.turn(
        f["agent_id"],
        f["agent_metadata"],
        f["request_original"].encode(),
        f["response"].encode(),
        ts=line["ts"],
        provider_model=f"{line['effective_provider']}/{line['effective_model']}",
        sse=True,
        context=f["runtime_context"],
    )
    assert (t.recall.decode(), t.retain.decode()) == (f["recall_body"], f["retain_body"])


def test_secret_fixtures_show_cllamas_own_redaction() -> None:
    """What cllama leaves of a Bearer token cut by an SSE event boundary: redacted up to the cut when 8+
    characters came before it, not at all below that; the rest of the token goes on to the memory service."""
    for name, cut in (("openai-sse-secret", 12), ("anthropic-sse-secret", 5)):
        f = _load(next(p for p in FIXTURES if p.stem == name))
        retain = json.loads(f["retain_body"])
        text = retain["entry"]["response"]["text"]
        assert retain["metadata"].get("policy_removed", 0) >= (1 if cut >= 8 else 0)
        tail = next(
            ev["choices"][0]["delta"]["content"] if "choices" in ev else ev["delta"]["text"]
            for ev in (json.loads(x[6:]) for x in f["response"].split("\n") if x.startswith("data: {"))
            if "with each call" in json.dumps(ev)
        )
        remainder = tail.split(" with each call")[0]
        assert remainder in text  # the token's remainder reaches the service
        assert ("Bearer [redacted]" in text) == (cut >= 8)


GO_FLOATS = [
    (0.0, "0"),
    (-0.0, "-0"),
    (1.0, "1"),
    (100.0, "100"),
    (0.2, "0.2"),
    (1e-6, "0.000001"),
    (1.5e-7, "1.5e-7"),
    (1e-10, "1e-10"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (123456789.125, "123456789.125"),
    (0.000165, "0.000165"),
    (2.5e300, "2.5e+300"),
]


@pytest.mark.parametrize(("value", "text"), GO_FLOATS)
def test_go_float(value: float, text: str) -> None:
    assert gojson.go_float(value) == text


def test_go_string_and_compact() -> None:
    assert (
        gojson.go_string('a<b>&"\\\n\t\b\f\x01\x7f é\u2028')
        == '"a\\u003cb\\u003e\\u0026\\"\\\\\\n\\t\\b\\f\\u0001\x7f é\\u2028"'
    )
    assert gojson.go_string("x\udcff") == '"x\\ufffd"'  # a byte that was not UTF-8
    raw = b'{ "b" : 1.50, "a" : [ "<x> & y" , 2E3 ] ,"c":"\xe2\x80\xa8 \\u00e9" }\n'
    assert gojson.go_compact(raw) == b'{"b":1.50,"a":["\\u003cx\\u003e \\u0026 y",2E3],"c":"\\u2028 \\u00e9"}'
    assert gojson.go_marshal({"b": 1.50, "a": [2000, True, None]}) == '{"a":[2000,true,null],"b":1.5}'


SCRUBS = [
    ("key sk-abcdef1234 here", "key [redacted-secret] here", 1),
    ("sk-abc", "sk-abc", 0),  # under 6 characters after sk-
    ("Authorization: Bearer abcdefgh", "Authorization: Bearer [redacted]", 1),
    ("bearer\tabcdefgh.ij", "bearer [redacted]", 1),
    ("Bearer abcdefg", "Bearer abcdefg", 0),  # 7 characters: kept
    ("xBearer abcdefgh", "xBearer abcdefgh", 0),  # no word boundary
    ("éBearer abcdefgh", "éBearer [redacted]", 1),  # RE2's \b is ASCII: é is not a word character
    ("Bearer sk-abcdefgh", "Bearer [redacted-secret]", 1),
]


@pytest.mark.parametrize(("text", "scrubbed", "count"), SCRUBS)
def test_scrub_text(text: str, scrubbed: str, count: int) -> None:
    assert cs.scrub_text(text) == (scrubbed, count)


def test_sse_scrub_is_per_event_so_a_cut_token_survives_in_part() -> None:
    token = "Zq7RkP2mW9xT4vB8nC1dF6gH3jL5"
    for cut in range(len(token) + 1):
        reply = ps.Reply(pieces=["Authorization: Bearer " + token[:cut], token[cut:] + " ok"], model="gpt-4o-mini")
        text, _ = cs.scrub_text(ps.openai_sse(reply, include_usage=True).decode())
        assert token[cut:] in text  # the part after the cut always gets through
        assert (token[:cut] in text) == (cut < 8)  # the part before it only when too short for the pattern


def test_recall_policy_limits() -> None:
    blocks = [{"text": "x" * 1000, "kind": "session"} for _ in range(10)]
    kept, removed = cs.apply_recall_memory_policy(blocks)
    assert (len(kept), removed) == (8, 2)
    big = [{"text": "y" * 5000}, {"text": "z" * 5000}, {"text": "w" * 100}, {"text": "t", "kind": "session_tail"}]
    kept, removed = cs.apply_recall_memory_policy(big)
    assert [len(k["text"]) for k in kept] == [5000, 100] and removed == 2
    block = cs.format_memory_blocks("svc", [{"text": "hi", "kind": "daily", "score": 0.834}])
    assert block == "--- BEGIN MEMORY (from svc) ---\n[kind=daily, score=0.83]\nhi\n--- END MEMORY ---"
