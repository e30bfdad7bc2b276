"""Redaction corpus: real-shaped secrets of every kind in prose, JSON, URLs and Markdown become
``[REDACTED:<kind>]``; look-alikes (hashes, UUIDs, paths, versions, dates, ordinary words) survive unchanged.

Secrets are assembled from pieces at run time so that no real-looking credential sits in the repository as
one literal (push-protection style scanners would flag it)."""

from __future__ import annotations

import json
import random
import string
import time

import pytest

from mdmem.util.redaction import KINDS, find_secrets, redact

_rng = random.Random(12)


def _chars(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """``n`` random characters that surely mix upper case, lower case and digits."""
    body = "".join(_rng.choice(alphabet) for _ in range(n - 3))
    return body + "aZ7"


def _join(*parts: str) -> str:
    return "".join(parts)


B64 = string.ascii_letters + string.digits + "+/"
SECRETS: dict[str, str] = {
    "openai_key": _join("sk", "-", _chars(48)),
    "openai_project_key": _join("sk", "-proj-", _chars(40, string.ascii_letters + string.digits + "_-"), "T3B", "x9"),
    "anthropic_key": _join("sk", "-ant-", "api03-", _chars(93, string.ascii_letters + string.digits + "_-"), "AA"),
    "github_token": _join("gh", "p_", _chars(36)),
    "github_pat": _join("github", "_pat_", _chars(22), "_", _chars(59)),
    "slack_token": _join("xo", "xb-", "2401", "9385", "1234-", "5023", "8811", "2345-", _chars(24)),
    "slack_webhook": _join(
        "https://hooks.", "slack.com/services/", "T0", _chars(8).upper(), "/B0", _chars(8).upper(), "/", _chars(24)
    ),
    "aws_access_key": _join("AK", "IA", _chars(16, string.ascii_uppercase + string.digits).upper()),
    "aws_secret_key": _join(_chars(20, B64), _chars(20, B64)),
    "jwt": _join(
        "ey",
        "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        ".",
        "ey",
        "JzdWIiOiIxMjM0NTY3ODkwIn0",
        ".",
        _chars(43, string.ascii_letters + string.digits + "_-"),
    ),
    "bearer": _join(_chars(32, string.ascii_letters + string.digits + "._-")),
    "password": _join("Tr0ub4dor", "&3-", "horse"),
}
PEM = _join(
    "-----BEGIN ",
    "RSA PRIVATE KEY-----\n",
    "\n".join(_chars(64, B64) for _ in range(5)),
    "\n",
    _chars(20, B64),
    "==\n-----END ",
    "RSA PRIVATE KEY-----",
)


def _marks(text: str) -> list[str]:
    return [kind for _, _, kind in find_secrets(text)]


@pytest.mark.parametrize(
    ("template", "secret", "kind"),
    [
        ("Use the key {} for the staging project.", "openai_key", "openai_key"),
        ('{{"apiKey": "{}", "model": "gpt-4o-mini"}}', "openai_project_key", "openai_key"),
        ("export ANTHROPIC_API_KEY={}\n", "anthropic_key", "anthropic_key"),
        ("- token for CI: `{}`", "github_token", "github_token"),
        ("git clone https://x:{}@github.com/acme/app.git", "github_pat", "github_token"),
        ("slack bot ({}) posts to #ops", "slack_token", "slack_token"),
        ("webhook: {}", "slack_webhook", "slack_token"),
        ("| aws | {} | us-east-1 |", "aws_access_key", "aws_access_key"),
        ("aws_secret_access_key = {}\n", "aws_secret_key", "aws_secret_key"),
        ('{{"AWS_SECRET_ACCESS_KEY": "{}"}}', "aws_secret_key", "aws_secret_key"),
        ("Cookie was {}; expires tomorrow", "jwt", "jwt"),
        ("curl -H 'Authorization: Bearer {}' https://api.example.org", "bearer", "bearer_token"),
        ("db password: {}", "password", "keyed_secret"),
        ('{{"client_secret": "{}"}}', "bearer", "keyed_secret"),
    ],
)
def test_each_kind_is_redacted_in_context(template: str, secret: str, kind: str) -> None:
    value = SECRETS[secret]
    text = template.format(value)
    out = redact(text)
    assert value not in out
    assert f"[REDACTED:{kind}]" in out
    assert out == text.replace(value, f"[REDACTED:{kind}]"), "everything but the secret is byte-identical"


def test_url_password_only_the_password_goes() -> None:
    pw = _join("s3cr", "et-", _chars(10))
    text = f"Primary DB is postgres://app_user:{pw}@db.internal:5432/ledger (see runbook)."
    assert (
        redact(text)
        == "Primary DB is postgres://app_user:[REDACTED:url_password]@db.internal:5432/ledger (see runbook)."
    )


def test_bearer_keeps_the_word_bearer() -> None:
    out = redact("Authorization: Bearer " + SECRETS["bearer"])
    assert out == "Authorization: Bearer [REDACTED:bearer_token]"


def test_pem_block_is_one_secret_whole() -> None:
    text = f"Deploy key below.\n\n```\n{PEM}\n```\nRotate it in March.\n"
    out = redact(text)
    assert out == "Deploy key below.\n\n```\n[REDACTED:private_key]\n```\nRotate it in March.\n"


def test_unterminated_pem_still_loses_its_body() -> None:
    head = PEM.split("-----END")[0]
    out = redact("pasted half a key: " + head + "\nthen gave up")
    assert "[REDACTED:private_key]" in out
    assert not any(line in out for line in head.splitlines()[1:] if line)
    assert out.endswith("\nthen gave up")


def test_a_mixed_document_redacts_everything_and_spans_are_sorted_and_disjoint() -> None:
    doc = "\n".join(
        [
            "# Credentials we must never keep",
            f"- openai: {SECRETS['openai_key']}",
            f"- anthropic: {SECRETS['anthropic_key']}",
            f"- gh: {SECRETS['github_token']}",
            f"- jwt: {SECRETS['jwt']}",
            f"- aws: {SECRETS['aws_access_key']}",
            f"- header: Authorization: Bearer {SECRETS['jwt']}",
            json.dumps({"password": SECRETS["password"], "url": f"https://bob:{SECRETS['password']}@h.example/x"}),
            PEM,
        ]
    )
    spans = find_secrets(doc)
    assert spans == sorted(spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    out = redact(doc)
    for value in SECRETS.values():
        if value in doc:
            assert value not in out
    assert "-----BEGIN" not in out
    assert {kind for _, _, kind in spans} <= set(KINDS)


LOOK_ALIKES = [
    "Fixed in commit 3f9a2b1c4d5e6f708192a3b4c5d6e7f809102132 (short 3f9a2b1).",
    "request id 123e4567-e89b-12d3-a456-426614174000, trace 6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  dist/mdmemory-0.1.0.tar.gz",
    "Check the task-list and the disk-usage report; ask-me-anything session on Friday.",
    "We use sk-learn-compatible-estimators-everywhere in the notebook.",
    "Paths: /home/alice/.config/mdmemory/config.json5 and C:\\Users\\bob\\AppData\\Local\\tmp",
    "Upgraded to Python 3.11.9, numpy 1.26.4, llama-cpp-python 0.3.36; released 2026-11-23T22:41:07Z.",
    "The token limit is 8192; password rotation happens monthly; set apiKey in the config.",
    'config: {"apiKey": "${OPENAI_API_KEY}", "password": "<your password>", "token": "xxxxxxxxxxxx"}',
    "Internationalization, counterrevolutionaries and antidisestablishmentarianism are long words.",
    "See https://example.com:8443/path?q=1#frag and mailto:alice@example.com, ssh git@github.com:acme/app.git",
    "The bearer of this letter is trusted. Bearer authentication is described in RFC 6750.",
    "AKIA is a prefix; AKIAEXAMPLE is too short; ghp_ alone is nothing; xoxb- alone too.",
    "eyJ is how base64 JSON starts, but eyJhbGci alone is no token.",
    "Already redacted: [REDACTED:openai_key] and Bearer [REDACTED:bearer_token].",
    "password: correcthorse",
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_survive_unchanged(text: str) -> None:
    assert find_secrets(text) == []
    assert redact(text) == text


def test_redacting_twice_changes_nothing_more() -> None:
    text = f"key {SECRETS['openai_key']} and postgres://u:{SECRETS['password']}@h/db"
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize(
    "hostile",
    [
        "-----BEGIN RSA PRIVATE KEY-----" + "-" * 20000,
        "://" + "a" * 20000 + ":" + "b" * 20000,
        "password=" + "a" * 50000,
        "eyJ" + "a" * 20000 + ".eyJ" + "b" * 20000,
        "Bearer " * 5000,
        "sk-" * 10000,
        "x" * 100000,
    ],
)
def test_hostile_input_stays_linear(hostile: str) -> None:
    # A generous bound: catastrophic backtracking would take minutes, linear work takes milliseconds.
    started = time.perf_counter()
    redact(hostile)
    assert time.perf_counter() - started < 2.0


def test_the_middle_of_a_pem_block_alone_is_still_key_material() -> None:
    body = PEM.split("\n")[1:-1]
    text = "...continued from the previous chunk:\n" + "\n".join(body[1:]) + "\n-----END"
    out = redact(text)
    assert not any(line in out for line in body[1:])
    assert out == "...continued from the previous chunk:\n[REDACTED:private_key]\n-----END"
    two = "\n".join(body[1:3])  # a two-line fragment of a key is key material too
    assert redact(two) == "[REDACTED:private_key]"
    one = body[2]  # one line alone is not (it could be any base64)
    assert redact(one) == one
