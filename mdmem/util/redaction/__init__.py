"""Secret redaction for text that leaves mdmem: retained turns, recall, pack, search snippets, session-start
context, and the paths and citations in them.

``redact(text)`` replaces every secret-shaped value with ``[REDACTED:<kind>]`` and leaves every other character
as it was; ``find_secrets(text)`` gives the spans, ``(start, end, kind)``, sorted and non-overlapping;
``redact_path(path)`` is ``redact`` for the paths outputs show, remembered. Where no kind is known (a config
value under a secret-looking key, a header value), ``REDACTED`` (``[REDACTED]``) stands in: one marker format
for every output (``credentials.py`` uses the same).

The detector (``rules.py``, ``scan.py``):

- **detect-secrets' patterns** (Yelp, ``upstream.py``: a snapshot of its plugins' ``denylist`` regexes, checked
  against the installed package by tests/test_redaction_upstream.py): AWS, Artifactory, Azure storage, basic
  auth in URLs, Cloudant, Discord, GitHub, GitLab, Mailchimp, PyPI, SendGrid, Slack, SoftLayer, Square,
  Stripe, Telegram and Twilio. They run over the whole text with offsets (detect-secrets itself works
  line by line, returns values but not where they are, and took 11-14 ms per 8 KiB; its import alone costs
  ~100 ms, as much as a whole ``mdmem search``). Patterns that are slow, quadratic or flag what is no secret
  are not used; ``rules.UPSTREAM`` says why for each.
- **Our rules** for what it lacks: private keys (PEM and OpenSSH blocks, PuTTY files, and key bodies without
  their BEGIN line, from two lines), JWTs, Anthropic and project-scoped OpenAI keys, Google, Hugging Face,
  npm, Stripe test keys and webhook secrets, and ~30 more prefixed tokens; signed URLs' signatures, ``?key=``,
  token-like cookies, passwords on ``sshpass``/``mysql``/``openssl`` command lines; ``Bearer`` (also ``Bearer:`` and a
  token on the next line), ``Authorization: Basic`` (base64 of ``user:password``) and other schemes,
  ``curl -u``, ``--token``, URL passwords, and the value after ``password``/``PGPASSWORD``/``secret``/
  ``api_key``/``token``/``credentials``... (quoted, unquoted, XML, or in a YAML block on the next line; a
  password also after a space) when it is no placeholder, no reference to where a secret is kept (an
  environment variable's name, ``settings.SECRET_KEY``, a file path) and has some entropy.
- **Normalised views**: Unicode's invisible characters (zero-width space, soft hyphen, joiners...) are ignored
  for detection and the whole original span goes; ``%XX`` escapes and backslash escapes (JSON quoted in JSON)
  are decoded; a token wrapped over lines is
  joined, and a secret ending a line goes on over a random-looking next line; a base64 or hex run whose
  decoding holds a secret goes whole (kind of the secret inside).
- **Composition**: the rest of a token glued to another redactor's marker (``Bearer [redacted]kQ9...``,
  ``[redacted-secret]...``, ``<redacted>``, ``***``, ``[REDACTED:kind]``) is ``partial_secret``, marker
  included: a proxy that redacts each stream event on its own leaves the rest of a split token in the next.

Git and content hashes, UUIDs, base64 images, versions, dates, paths, URLs without a password and ordinary
words are left alone (tests/test_redaction_corpus.py). Every rule is linear in the text (a literal start or a
prefilter that has one, bounded classes, token rules tried only around long runs of token characters and at
most ``scan._LONGEST`` characters from each start); 0.16-0.65 ms per 8 KiB of notes and Markdown, ~1.4 ms for
text dense with secrets (``benchmarks/redaction_speed.py``). Imports nothing of ours but ``lazyre``, so any
module may use it.
"""

from __future__ import annotations

import functools

from mdmem.util.lazyre import lazy
from mdmem.util.redaction.rules import OWN, RULES
from mdmem.util.redaction.scan import (
    Dispatch,
    continued,
    cookie_spans,
    encoded_spans,
    glued_spans,
    key_bodies,
    rule_spans,
    token_regions,
    wrapped_spans,
)
from mdmem.util.redaction.views import Span, backslash_decoded, mapped, percent_decoded, without_ignorables

__all__ = ["KINDS", "MARKER_PREFIX", "REDACTED", "find_secrets", "marker", "redact", "redact_path"]

REDACTED = "[REDACTED]"
"""What stands for a secret whose kind is unknown (a config value, a header value)."""
MARKER_PREFIX = "[REDACTED:"
"""How every marker of a known kind starts (``[REDACTED:<kind>]``)."""

_GENERIC = ("url_password", "bearer_token", "basic_auth", "npm_token", "keyed_secret", "partial_secret")
KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        ["private_key", "jwt", "session_cookie", *(r.kind for r in OWN if r.kind not in _GENERIC)]
        + [r.kind for r in RULES if r.kind not in _GENERIC]
        + list(_GENERIC)
    )
)
"""Every kind ``find_secrets`` may report, most specific first (the tie-break between equal spans)."""

_PRIORITY = {kind: i for i, kind in enumerate(KINDS)}
_TOKEN_RULES = tuple(r for r in RULES if r.token)
_OTHER_RULES = tuple(r for r in RULES if not r.token)
_TOKENS = Dispatch(_TOKEN_RULES)
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def marker(kind: str) -> str:
    """``[REDACTED:<kind>]``: what a secret of ``kind`` becomes."""
    return f"{MARKER_PREFIX}{kind}]"


def _lower(text: str) -> str:
    lowered = text.lower()
    if len(lowered) != len(text):  # a few non-ASCII letters grow in lower case: keep offsets aligned
        lowered = text.translate(_ASCII_LOWER)
    return lowered


def _resolve(found: list[Span]) -> list[Span]:
    """Sorted, non-overlapping: overlapping spans become one, covering both (no piece of either survives),
    with the kind of the one starting first, then of the longer, then the more specific."""
    spans: list[Span] = []
    for start, _, _, end, kind in sorted((s, -(e - s), _PRIORITY[k], e, k) for s, e, k in found):
        if spans and start < spans[-1][1]:
            if end > spans[-1][1]:
                spans[-1] = (spans[-1][0], end, spans[-1][2])
            continue
        spans.append((start, end, kind))
    return spans


def _find(text: str, decode: bool = True) -> list[Span]:
    lowered = _lower(text)
    found = rule_spans(text, lowered, _OTHER_RULES)
    regions = token_regions(text)
    if regions is None:
        found += rule_spans(text, lowered, _TOKEN_RULES)
    elif regions:
        found += _TOKENS.spans(text, lowered, regions)
    found += key_bodies(text)
    found += glued_spans(text, lowered)
    if "cookie" in lowered:
        found += cookie_spans(text, lowered)
    if "\n" in text:
        found += wrapped_spans(text, _TOKENS, found)
    if decode:
        found += encoded_spans(text, lambda inner: _resolve(_find(inner, decode=False)), found)
    return continued(text, found) if "\n" in text else found


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, kind)`` of the secrets in ``text``: sorted by start and non-overlapping. The text is
    also read without its invisible characters, with its ``%XX`` escapes decoded, and with its backslash
    escapes decoded (JSON quoted in JSON)."""
    view = without_ignorables(text)
    clean, offsets = view if view is not None else (text, None)
    found = _find(clean)
    for decoded in (percent_decoded(clean), backslash_decoded(clean)):
        if decoded is not None:
            plain, starts, ends = decoded
            found += [(starts[s], ends[e - 1], kind) for s, e, kind in _find(plain)]
    return _resolve(mapped(found, offsets) if offsets is not None else found)


def redact(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``; every other character is unchanged. With
    ``keep_lines``, a secret over several lines leaves its line breaks after the marker, so line numbers
    counted in the result are the source's (text that cites ``memory_get`` ranges)."""
    spans = find_secrets(text)
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for start, end, kind in spans:
        parts.append(text[pos:start])
        parts.append(marker(kind))
        if keep_lines:
            parts.append("\n" * text.count("\n", start, end))
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


_PATH_GATE = lazy(r"[A-Za-z0-9_+=]{10}|[=:@\s]")
"""What a path holding a secret has: a run of 10+ token characters (every token rule needs one) or an
assignment, a URL's ``user:password@`` or a space (``password is ...``). ``memory/2026-03-09.md`` has none,
so ``memory_get`` does not compile the rules to show it."""


def redact_path(path: str) -> str:
    """A file path as outputs show it (``path``, ``ref``, ``Source:`` lines, receipts): a token in a file name
    becomes its marker too. Paths recur in every answer, so the last 4,096 are remembered. The path a caller
    passes in (``memory_get``) is theirs and is never changed; only what mdmem prints is."""
    return _redact_path(path) if _PATH_GATE.search(path) is not None else path


@functools.lru_cache(maxsize=4096)
def _redact_path(path: str) -> str:
    return redact(path)
