"""The redaction corpus (tests/redaction_corpus.py): 94 real-shaped secrets of 48 kinds become
``[REDACTED:<kind>]`` with no piece left; 40+ look-alikes (hashes, UUIDs, base64 images, long words,
identifiers, paths, URLs, versions, ISBNs, phone numbers...) survive byte for byte; every rule stays linear."""

from __future__ import annotations

import time

import pytest

from mdmem.util.redaction import KINDS, find_secrets, marker, redact
from mdmem.util.redaction.rules import RULES
from tests.redaction_corpus import LOOK_ALIKES, SECRETS, Case


def secrets_of(case: Case) -> tuple[str, ...]:
    return case.secrets or (max(case.text.split(), key=len),)


def pieces(secret: str, size: int = 12) -> set[str]:
    return {secret[i : i + size] for i in range(0, max(1, len(secret) - size + 1))}


def test_the_corpus_is_wide() -> None:
    kinds = {case.kind for case in SECRETS if case.kind}
    assert len(SECRETS) >= 80 and len(kinds) >= 45, (len(SECRETS), len(kinds))
    assert kinds <= set(KINDS)
    assert len(LOOK_ALIKES) >= 40


@pytest.mark.parametrize("case", SECRETS, ids=[c.name for c in SECRETS])
def test_every_secret_goes_whole(case: Case) -> None:
    out = redact(case.text)
    for secret in secrets_of(case):
        left = [p for p in pieces(secret) if p in out]
        assert not left, f"{case.name}: {left[:3]} survived in {out!r}"
    if case.kind:
        assert marker(case.kind) in out, out
    assert redact(out) == out, "redacting twice changes nothing more"


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_survive_unchanged(text: str) -> None:
    assert find_secrets(text) == []
    assert redact(text) == text


def test_only_the_secret_goes() -> None:
    case = next(c for c in SECRETS if c.name == "url password")
    assert redact(case.text) == case.text.replace(case.secrets[0], "[REDACTED:url_password]")
    text = "Use the key " + SECRETS[1].secrets[0] + " for the staging project.\nThen restart."
    assert redact(text) == "Use the key [REDACTED:openai_key] for the staging project.\nThen restart."


def test_spans_are_sorted_disjoint_and_cover_invisible_characters() -> None:
    doc = "\n\n".join(case.text for case in SECRETS)
    spans = find_secrets(doc)
    assert spans == sorted(spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    out = redact(doc)
    assert "\u200b" not in out and "\u00ad" not in out  # the invisible character inside a key went with it


def test_keep_lines_keeps_the_line_count() -> None:
    case = next(c for c in SECRETS if c.name == "pem block")
    out = redact(case.text, keep_lines=True)
    assert out.count("\n") == case.text.count("\n") and "[REDACTED:private_key]" in out


def _literal_start(pattern: str) -> str:
    head = ""
    for ch in pattern.replace("\\.", "."):
        if not (ch.isalnum() or ch in "_-:/.=<>"):
            break
        head += ch
    return head or "a"


HOSTILE = [
    "-----BEGIN RSA PRIVATE KEY-----" + "-" * 20000,
    "://" + "a" * 20000 + ":" + "b" * 20000,
    "password=" + "a" * 50000,
    "password:\n" + " " * 50000,
    "eyJ" + "a" * 20000 + ".eyJ" + "b" * 20000,
    "Bearer " * 5000,
    "Bearer\n" * 5000,
    "x" * 100000,
    "a1\n" * 30000,
    ("ab12" * 5 + "\n") * 5000,
    ("aB3" * 21 + "a\n") * 2000,
    "[redacted]" * 10000,
    "***a1" * 10000,
    "QUtJQ" * 20000,
    "\u200b".join(["sk-"] * 10000),
    "1234567890:" * 10000,
    "hf_" + "aB" * 30000,
    "Cookie: " * 10000 + "a=" * 10000,
    "Set-Cookie: a=b;" * 10000,
    "mysql " * 10000 + " -p",
    '\\"' * 30000,
    "\\u002d" * 20000,
    "key=" * 20000,
    *{_literal_start(rule.pattern.pattern) * 5000 for rule in RULES},
    *{(_literal_start(rule.pattern.pattern) + "aZ7") * 3000 for rule in RULES},
]


@pytest.mark.parametrize("hostile", HOSTILE, ids=[repr(h[:16]) for h in HOSTILE])
def test_hostile_input_stays_linear(hostile: str) -> None:
    # A generous bound: catastrophic backtracking takes minutes, linear work milliseconds (on a loaded machine).
    started = time.perf_counter()
    redact(hostile)
    assert time.perf_counter() - started < 2.0
