"""Redaction that composes with the proxy's (issue 21): a secret split across two SSE deltas, at every
character offset, after cllama redacted each event on its own (``Bearer [redacted]`` in one delta, the rest
of the token in the next), never reaches the session file, recall, search or pack.

cllama's ``scrubMemoryText`` (internal/proxy/memory.go) is ported below: it runs on the raw SSE text, where
each ``data:`` line is one event, so it cannot see a token cut by an event boundary. mdmem joins the deltas
(files.payloads.response_sse) and redacts the joined text, including the rest of a token glued to the
proxy's marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.files.entry_id import entry_id
from mdmem.files.sessionlog import render_entry
from tests.service_bodies import anthropic_entry, openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

# upper case and digits only: no 4-character piece of them can occur by chance in the lower-case prose around
TOKEN = "Q7MZP2XK9LRT4VWB8NCY1DFH6JSA3EGU"
SECRETS = {
    "bearer": f"Authorization: Bearer {TOKEN}",
    "sk": "sk-proj-" + TOKEN + "4KD9",
    "github": "gh" + "p_" + TOKEN + "X2R7",  # cllama does not know it: mdmem alone must take it whole
}
BEFORE, AFTER = "please call the billing api with ", " and then report the weather"

_CLLAMA_SECRET = re.compile(r"sk-[A-Za-z0-9_-]{6,}")
_CLLAMA_BEARER = re.compile(r"(?i)\bBearer[ \t]+[A-Za-z0-9._-]{8,}", re.ASCII)


def cllama_scrub(text: str) -> str:
    """cllama's scrubMemoryText: ``sk-...`` becomes ``[redacted-secret]``, ``Bearer <8+>`` ``Bearer [redacted]``."""
    text = _CLLAMA_SECRET.sub("[redacted-secret]", text)
    return _CLLAMA_BEARER.sub(lambda m: m[0].split()[0] + " [redacted]", text)


def cllama_scrub_value(value: Any) -> Any:
    """cllama's scrubMemoryValue: every string of a JSON value, on its own."""
    if isinstance(value, dict):
        return {k: cllama_scrub_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cllama_scrub_value(v) for v in value]
    return cllama_scrub(value) if isinstance(value, str) else value


def split_entry(shape: str, deltas: list[str], ts: str = "2026-11-23T14:03:07Z") -> dict[str, Any]:
    """An SSE entry whose answer streams as ``deltas``, then what cllama's retain policy makes of it."""
    if shape == "openai":
        entry = openai_entry("what should I do next?", "x", sse=True, ts=ts)
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        events += [{"choices": [{"index": 0, "delta": {"content": d}}]} for d in deltas]
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    else:
        entry = anthropic_entry("what should I do next?", "x", sse=True, ts=ts)
        events = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": d}} for d in deltas
        ]
        text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    entry["response"] = {"format": "sse", "text": cllama_scrub(text)}
    entry["request_original"] = cllama_scrub_value(entry["request_original"])
    return entry


def leftovers(text: str, secret: str, size: int = 4) -> list[str]:
    """Pieces of the secret's random part still in ``text``."""
    random_part = secret[secret.index(TOKEN[:4]) :]
    return [random_part[i : i + size] for i in range(len(random_part) - size + 1) if random_part[i : i + size] in text]


def test_cllama_port_behaves_like_the_proxy_on_one_event() -> None:
    assert cllama_scrub(f"Bearer {TOKEN}") == "Bearer [redacted]"
    assert cllama_scrub("Bearer " + TOKEN[:5]) == "Bearer " + TOKEN[:5]  # under 8 characters: left alone
    assert cllama_scrub(SECRETS["sk"] + " ok") == "[redacted-secret] ok"


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_secret_split_at_every_offset_never_reaches_the_block(shape: str, name: str) -> None:
    sentence = BEFORE + SECRETS[name] + AFTER
    start = len(BEFORE)
    for cut in range(start, start + len(SECRETS[name]) + 1):
        entry = split_entry(shape, [sentence[:cut], sentence[cut:]])
        _, _, block = render_entry(entry, {"timezone": "UTC"})
        assert not leftovers(block, SECRETS[name]), (cut, block)
        assert BEFORE.strip() in block and AFTER.strip() in block, (cut, block)  # only the secret went
        assert "[REDACTED:" in block or "[redacted" in block  # ours, or the proxy's where it saw it whole


def test_the_rest_after_the_proxys_marker_is_what_mdmemory_takes() -> None:
    sentence = BEFORE + SECRETS["bearer"] + AFTER
    token_at = len(BEFORE) + len("Authorization: Bearer ")
    for seen in range(8, len(TOKEN)):  # the proxy saw 8+ characters in the first delta: it redacted those
        entry = split_entry("openai", [sentence[: token_at + seen], sentence[token_at + seen :]])
        assert "Bearer [redacted]" in entry["response"]["text"]
        _, _, block = render_entry(entry, {})
        assert "Authorization: Bearer [REDACTED:partial_secret] and then" in block, block


def test_three_deltas_and_a_marker_glued_on_both_sides() -> None:
    sentence = BEFORE + SECRETS["bearer"] + AFTER
    a, b = len(BEFORE) + 25, len(BEFORE) + 33
    entry = split_entry("openai", [sentence[:a], sentence[a:b], sentence[b:]])
    _, _, block = render_entry(entry, {})
    assert not leftovers(block, SECRETS["bearer"])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = write_config(tmp_path / "config.json", {"main": ws})
    svc = Service(cfg, tmp_path / "home", "test-token-3c0ffee", tmp_path / "serve.log")
    svc.start()
    yield svc
    svc.stop()


def test_a_real_service_keeps_no_piece_of_a_split_bearer_token(service: Service, tmp_path: Path) -> None:
    """Every offset through ``mdmem serve``: the session files, recall, and what search and pack return
    hold no piece of the token, though cllama left the rest of it in the next delta each time."""
    sentence = BEFORE + SECRETS["bearer"] + AFTER
    start = len(BEFORE)
    for i, cut in enumerate(range(start, start + len(SECRETS["bearer"]) + 1)):
        shape = "openai" if i % 2 == 0 else "anthropic"
        entry = split_entry(shape, [sentence[:cut], sentence[cut:]], ts=f"2026-11-23T14:{i // 60:02d}:{i % 60:02d}Z")
        reply = service.call("POST", "/retain", retain_body("main", entry))
        assert reply.status == 202 and reply.body["id"] == entry_id(entry), reply.raw
    files = sorted((tmp_path / "ws" / "sessions").glob("*.md"))
    text = "".join(f.read_text() for f in files)
    assert text.count("report the weather") == len(SECRETS["bearer"]) + 1
    assert not leftovers(text, SECRETS["bearer"])
    recalled = service.call("POST", "/recall", recall_body("main", "call the billing api then report the weather"))
    assert recalled.status == 200 and recalled.body["memories"], recalled.raw
    assert not leftovers(json.dumps(recalled.body), SECRETS["bearer"])
