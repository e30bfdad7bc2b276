"""Secret redaction for text that leaves mdmemory: retained turns, recall, pack and search snippets.

``redact(text)`` replaces every secret-shaped value with ``[REDACTED:<kind>]`` and leaves every other byte
as it was; ``find_secrets(text)`` gives the spans, ``(start, end, kind)``, sorted and non-overlapping.

Kinds (lowercase, stable; callers may rely on them):

==================  ==========================================================================================
``private_key``     a whole PEM block, ``-----BEGIN ... PRIVATE KEY-----`` through its ``END`` line (or the
                    base64 lines after an unterminated ``BEGIN``), and any run of 3+ 64-character base64
                    lines (the middle of a key seen without its BEGIN line; certificates look the same)
``jwt``             ``eyJ<header>.eyJ<payload>.<signature>``
``anthropic_key``   ``sk-ant-...``
``openai_key``      ``sk-...``, ``sk-proj-...``, ``sk-svcacct-...``, ``sk-admin-...`` with 20+ key characters
                    mixing letters and digits (so ``task-list`` or ``sk-learn-style-names`` survive)
``github_token``    ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36 characters, ``github_pat_...``
``slack_token``     ``xoxb-``/``xoxp-``/``xoxa-``/``xoxo-``/``xoxs-``/``xoxr-``/``xapp-`` tokens, webhook URLs
``aws_access_key``  ``AKIA``/``ASIA``/``ABIA``/``ACCA``/``A3T?`` + 16 upper-case characters
``aws_secret_key``  40 base64 characters after a key such as ``aws_secret_access_key =``
``url_password``    only the password of ``scheme://user:password@host``
``bearer_token``    the token after ``Bearer `` (the word ``Bearer`` stays)
``keyed_secret``    the value after ``password``/``passwd``/``secret``/``api_key``/``apikey``/``token``/
                    ``access_token``/``auth_token``/``client_secret``/``private_key`` and ``=`` or ``:``, when
                    it is at least 8 characters, mixes letters with digits or symbols, has a Shannon entropy of
                    at least 3 bits per character and is no placeholder (``<...>``, ``${...}``, ``xxxx``, ``***``)
==================  ==========================================================================================

Why hand-written patterns and not detect-secrets: its plugins (1.5.0) were evaluated as a library. They work
line by line and return the secret's value but not its offsets, so ``redact`` would have to search the value
again; ``PrivateKeyDetector`` only flags the ``BEGIN`` line, not the key block; ``OpenAIDetector`` only knows
the legacy ``...T3BlbkFJ...`` keys, not ``sk-proj-``; there is no Anthropic detector; and the eight plugins
that fit took 11-14 ms per 8 KiB on this machine against 0.15-0.35 ms for these patterns: ten times the
budget of a recall (``benchmarks/redaction_speed.py --detect-secrets``). The patterns below borrow
detect-secrets' shapes where they are right (AWS prefixes, GitHub prefixes, Slack, JWT, basic auth). Each
is linear: a literal anchor, bounded classes and no nested quantifiers over the same characters, so no input
backtracks catastrophically.

Imports nothing of ours, so any module may use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mdmemory.lazyre import LazyPattern, lazy

__all__ = ["KINDS", "find_secrets", "redact"]


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: LazyPattern
    group: int = 0
    """Which group is the secret (0: the whole match; a prefix such as ``Bearer `` is kept otherwise)."""
    check: Callable[[str], bool] | None = None
    """Extra test on the secret's text; a match that fails it is not a secret."""
    lowered: bool = False
    """Run on the text in lower case (a written-lower-case pattern instead of a slow ``(?i)`` one)."""


_PLACEHOLDER = lazy(r"(?i)^<.*>$|^\$\{|^\{\{|x{4}|\*{3}|\.{3}|redacted|example|your[_-]")


def _mixed(value: str) -> bool:
    """Letters and digits both present (real keys; not words joined by hyphens)."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _keyed_value(value: str) -> bool:
    if _PLACEHOLDER.search(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_other = any(not c.isalpha() for c in value)
    return has_alpha and has_other and _entropy(value) >= 3.0


def _token(value: str) -> bool:
    return _mixed(value) and not _PLACEHOLDER.search(value)


_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        lazy(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^-]|-(?!----END ))*-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"|-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=:,\- ]{16,})*"
        ),
    ),
    _Rule("jwt", lazy(r"eyJ(?<![A-Za-z0-9_]eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    _Rule("anthropic_key", lazy(r"sk-(?<![A-Za-z0-9_]sk-)ant-[A-Za-z0-9_-]{20,}"), check=_token),
    _Rule(
        "openai_key",
        lazy(r"sk-(?<![A-Za-z0-9_]sk-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"),
        check=lambda v: _token(v[3:]) and sum(c.isalnum() for c in v) >= 20,
    ),
    _Rule(
        "github_token",
        lazy(r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36,255}|ithub_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"),
    ),
    _Rule("slack_token", lazy(r"x(?<![A-Za-z0-9_]x)(?:ox[abposr]|app)-[A-Za-z0-9-]{10,}"), check=_token),
    _Rule(
        "slack_token",
        lazy(r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"),
    ),
    _Rule(
        "aws_access_key",
        lazy(r"A(?<![A-Za-z0-9_]A)(?:3T[A-Z0-9]|KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9_])"),
    ),
    _Rule(
        "aws_secret_key",
        lazy(
            r"aws(?<![a-z0-9]aws)_?(?:secret_?(?:access_?)?key|secret)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        group=1,
        lowered=True,
    ),
    _Rule("url_password", lazy(r"://[^\s:/?#@\[\]]{1,256}:([^\s/?#@\[\]]{1,256})@"), group=1),
    _Rule(
        "bearer_token",
        lazy(r"bearer(?<![a-z0-9_]bearer)[ \t]+([a-z0-9._~+/-]{16,}=*)"),
        group=1,
        check=_token,
        lowered=True,
    ),
    *(
        _Rule(
            "keyed_secret",
            lazy(
                rf"{key[0]}(?<![a-z0-9]{key[0]}){key[1:]}[\"']?[ \t]*[:=][ \t]*[\"']?([^\s\"',;{{}}()\[\]<>`]{{8,256}})"
            ),
            group=1,
            check=_keyed_value,
            lowered=True,
        )
        # access_token, client_secret, db_password...: "_" may come before the key word
        for key in (r"pass(?:word|wd)", "pwd", "secret", r"api[_-]?key", "token", r"private[_-]?key")
    ),
)

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _RULES))
"""Every kind ``find_secrets`` may report, most specific first."""

_PRIORITY = {kind: i for i, kind in enumerate(KINDS)}


_B64_LINE = lazy(r"[A-Za-z0-9+/]{64}")
_B64_TAIL = lazy(r"[A-Za-z0-9+/]{1,64}={0,2}")
PEM_BODY_LINES = 3
"""This many 64-character base64 lines in a row are PEM key material even without BEGIN/END lines in view
(a chunk or a pack range can hold the middle of a key); a public certificate looks the same and goes too."""


def _pem_bodies(text: str) -> list[tuple[int, int]]:
    """Spans of runs of ``PEM_BODY_LINES`` or more 64-character base64 lines, with a shorter last line."""
    spans: list[tuple[int, int]] = []
    start = run = pos = 0
    for line in text.split("\n"):
        body = line.rstrip("\r").strip()
        if len(body) == 64 and _B64_LINE.fullmatch(body):
            if run == 0:
                start = pos
            run += 1
            end = pos + len(line)
        elif run:
            if run >= PEM_BODY_LINES:
                if body and _B64_TAIL.fullmatch(body):
                    end = pos + len(line)
                spans.append((start, end))
            run = 0
        pos += len(line) + 1
    if run >= PEM_BODY_LINES:
        spans.append((start, end))
    return spans


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, kind)`` of the secrets in ``text``: sorted by start and non-overlapping. Where two
    rules overlap, the one starting first wins, then the longer, then the more specific kind."""
    found: list[tuple[int, int, int, str]] = []
    lowered = text.lower()
    if len(lowered) != len(text):  # a few non-ASCII letters grow in lower case: keep offsets aligned
        lowered = text.translate(_ASCII_LOWER)
    for rule in _RULES:
        for match in rule.pattern.finditer(lowered if rule.lowered else text):
            start, end = match.span(rule.group)
            if start == end or (rule.check is not None and not rule.check(text[start:end])):
                continue
            found.append((start, -(end - start), _PRIORITY[rule.kind], rule.kind))
    for start, end in _pem_bodies(text):
        found.append((start, -(end - start), _PRIORITY["private_key"], "private_key"))
    spans: list[tuple[int, int, str]] = []
    last_end = 0
    for start, neg_len, _, kind in sorted(found):
        if start >= last_end:
            spans.append((start, start - neg_len, kind))
            last_end = start - neg_len
    return spans


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``; every other character is unchanged."""
    spans = find_secrets(text)
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for start, end, kind in spans:
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{kind}]")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)
