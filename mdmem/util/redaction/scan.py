"""How the rules are run: over the text, over a view of it (invisible characters removed, wrapped lines
joined), over base64 runs decoded, and the detectors that are not one regular expression (key bodies, the
rest of a secret glued to another redactor's marker). Every function returns spans ``(start, end, kind)`` of
the text it was given; overlaps are resolved by the caller.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Callable, Sequence

from mdmem.util.lazyre import lazy
from mdmem.util.redaction import runs
from mdmem.util.redaction.rules import GLUED, Rule, first_chars, glued_remainder
from mdmem.util.redaction.values import DIGIT, UPPER, cased, entropy, mixed
from mdmem.util.redaction.views import Span, mapped

_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_TRIM_LEFT = " \t\r\n=:\"'"
_TRIM_RIGHT = " \t\r\n\"'."
TOKEN_RUN = 20
"""Every token rule's secret holds a run of this many token characters (``runs.TOKEN``)."""
_IGNORECASE = int(re.IGNORECASE)  # a plain int: ``int & RegexFlag`` goes through enum, ~20 us a time
_MAX_WINDOWS = 16
_LONGEST = 4096
"""A token rule's match is looked for in this many characters from its start (a match that fails late costs
that much at most, so a run of prefixes stays linear); a longer token is grown to its end."""


def _grow(text: str, end: int) -> int:
    n = len(text)
    while end < n and text[end] in _TOKEN:
        end += 1
    return end


def _accept(text: str, rule: Rule, start: int, end: int) -> tuple[int, int] | None:
    """The secret's span for a match of ``rule`` at ``start:end`` (trimmed, grown), or None if it is none."""
    if rule.trim:
        value = text[start:end]
        start += len(value) - len(value.lstrip(_TRIM_LEFT))
        end -= len(value) - len(value.rstrip(_TRIM_RIGHT))
    if start >= end:
        return None
    if rule.token:
        if start > 0 and text[start - 1] in _WORD:
            return None  # the middle of a longer word, not a token's start
        end = _grow(text, end)
    if rule.check is not None and not rule.check(text[start:end]):
        return None
    return start, end


def rule_spans(text: str, lowered: str, rules: Sequence[Rule], regions: Sequence[runs.Run] | None = None) -> list[Span]:
    """The matches of ``rules`` in ``text`` (``lowered``: ``text`` in lower case, offsets aligned), only within
    ``regions`` when given. A rule with a prefilter runs only when the text matches it."""
    found: list[Span] = []
    for rule in rules:
        if rule.prefilter is not None:
            caseless = rule.lowered or bool(rule.pattern.flags & _IGNORECASE)
            if rule.prefilter.search(lowered if caseless else text) is None:
                continue
        source = lowered if rule.lowered else text
        for start, end in regions if regions is not None else ((0, len(text)),):
            for match in rule.pattern.compiled.finditer(source, start, end):
                span = _accept(text, rule, *match.span(rule.group))
                if span is not None:
                    found.append((span[0], span[1], rule.kind))
    return found


def token_regions(text: str) -> list[runs.Run] | None:
    """Where token rules need to look: around each run of ``TOKEN_RUN`` token characters ([] when there is
    none: the common case for notes); None means the whole text (many runs)."""
    found = runs.long_runs(runs.mask(text, runs.TOKEN), TOKEN_RUN, limit=_MAX_WINDOWS + 1)
    if len(found) > _MAX_WINDOWS:
        return None
    return runs.windows(found, 16, len(text))


_WORD_START = lazy(r"(?<![A-Za-z0-9_])[A-Za-z0-9_]")


class Dispatch:
    """Token rules by their possible first characters: in a region, each word start is tried with the few rules
    that may start with its character (``Pattern.match`` there, ~0.3 us), instead of every rule searching every
    region (a search's fixed cost dominates on a few dozen characters)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.by_char: dict[str, list[Rule]] = {}
        for rule in rules:
            for c in first_chars(rule):
                self.by_char.setdefault(c, []).append(rule)

    def spans(self, text: str, lowered: str, regions: Sequence[runs.Run]) -> list[Span]:
        """The token rules' matches within ``regions``. As ``finditer`` does, a rule is not tried again inside
        its own last match (taken or not), nor any rule inside a secret found: linear in the region."""
        found: list[Span] = []
        for start, end in regions:
            tried: dict[int, int] = {}  # rule -> where its last match ended
            covered = start
            for w in _WORD_START.finditer(text, start, end):
                p = w.start()
                if p < covered:
                    continue
                for rule in self.by_char.get(text[p], ()):
                    if p < tried.get(id(rule), 0):
                        continue
                    m = rule.pattern.compiled.match(lowered if rule.lowered else text, p, min(end, p + _LONGEST))
                    if m is None:
                        continue
                    tried[id(rule)] = m.end()
                    span = _accept(text, rule, *m.span(rule.group))
                    if span is not None:
                        found.append((span[0], span[1], rule.kind))
                        covered = span[1]
                        break
        return found


# -- cookies --------------------------------------------------------------------------------------------------
_COOKIE_HEADER = lazy(r"(?:set-)?cookie[ \t]*:[ \t]*")
_COOKIE_PAIR = lazy(r"(?:^|[;,][ \t]*)[^=;,\s]{1,128}=\"?([^;,\s\"]{16,4096})")


def cookie_spans(text: str, lowered: str) -> list[Span]:
    """The values of a ``Cookie:`` or ``Set-Cookie:`` header that look like tokens (a session id is a
    password for as long as the session lasts): 16+ characters mixing letters and digits."""
    out: list[Span] = []
    end = 0
    for header in _COOKIE_HEADER.finditer(lowered):
        if header.start() < end:
            continue  # a second header on a line read already (each line is read once: linear)
        end = text.find("\n", header.end())
        end = len(text) if end < 0 else end
        line = text[header.end() : end]
        for m in _COOKIE_PAIR.finditer(line):
            if mixed(m[1]) and entropy(m[1]) >= 3.0:
                out.append((header.end() + m.start(1), header.end() + m.end(1), "session_cookie"))
    return out


# -- keys wrapped over lines ----------------------------------------------------------------------------------
_SIDE = 9  # a wrapped key has this many token characters on one side of a break at least


def _random_looking(piece: str) -> bool:
    """A continuation on the next line that is part of a key, not the next line's first word."""
    return DIGIT.search(piece) is not None or (len(piece) >= 12 and cased(piece[1:]))


_AFTER = re.compile(rb"ns*x{%d}" % _SIDE)
"""In the ``runs.WRAP`` mask: a line break, the next line's indentation and a long run of token characters."""


def _run_edge(masked: bytes, pos: int, step: int) -> int:
    """Where the run of ``x`` through ``pos`` ends (``step`` 1) or starts (``step`` -1), looking at most
    ``_LONGEST`` bytes away (a token is no longer)."""
    marks = (b" ", b"n", b"r", b"s")
    if step > 0:
        limit = min(len(masked), pos + _LONGEST)
        ends = [e for e in (masked.find(c, pos, limit) for c in marks) if e >= 0]
        return min(ends) if ends else limit
    limit = max(0, pos - _LONGEST)
    return max(max(masked.rfind(c, limit, pos) for c in marks) + 1, limit)


def _breaks(text: str, masked: bytes) -> dict[int, tuple[int, int, int, int]]:
    """Line breaks between token characters with a long run on one side: ``{newline offset: (run start, break
    start, break end, run end)}`` (the break takes a CR before it and the next line's indentation)."""
    newlines = set()
    for probe, offset in ((b"x" * _SIDE + b"n", _SIDE), (b"x" * _SIDE + b"rn", _SIDE + 1)):
        pos = 0
        while (i := masked.find(probe, pos)) >= 0:
            newlines.add(i + offset)
            pos = i + 1
    newlines.update(m.start() for m in _AFTER.finditer(masked))
    out: dict[int, tuple[int, int, int, int]] = {}
    for nl in newlines:
        head = nl - 1 if nl > 0 and masked[nl - 1] == ord("r") else nl
        tail = nl + 1
        while tail < len(masked) and masked[tail] == ord("s"):  # indentation, a quote's "> "
            tail += 1
        if head == 0 or masked[head - 1] != ord("x") or tail >= len(masked) or masked[tail] != ord("x"):
            continue
        out[nl] = (_run_edge(masked, head, -1), head, tail, _run_edge(masked, tail, 1))
    return out


def wrapped_spans(text: str, tokens: Dispatch, found: list[Span]) -> list[Span]:
    """Token secrets cut by line breaks (a key wrapped over two or more lines, indented or not): the token
    rules run again over each run of token characters with its line breaks removed. A match must cross a
    break; when the part before the break was a secret on its own, the next line's part must look random."""
    breaks = _breaks(text, runs.mask(text, runs.WRAP))
    groups: list[tuple[int, int, list[tuple[int, int]]]] = []
    for nl in sorted(breaks):
        start, head, tail, end = breaks[nl]
        if groups and groups[-1][1] == head:  # the previous line was all token characters: one run goes on
            groups[-1] = (groups[-1][0], end, [*groups[-1][2], (head, tail)])
        else:
            groups.append((start, end, [(head, tail)]))
    whole = {(s, e) for s, e, _ in found}
    out: list[Span] = []
    for first, last, cuts in groups:
        piece = "".join(
            text[a:b] for a, b in zip([first] + [t for _, t in cuts], [h for h, _ in cuts] + [last], strict=True)
        )
        if len(piece) < 18 or not (mixed(piece) or cased(piece[1:])):
            continue
        offsets: list[int] = []
        pos = first
        for head, tail in cuts:
            offsets += range(pos, head)
            pos = tail
        offsets += range(pos, last)
        for s, e, kind in mapped(tokens.spans(piece, piece.lower(), [(0, len(piece))]), offsets):
            crossed = [c for c in cuts if s < c[0] and c[1] < e]
            if not crossed:
                continue
            if (s, crossed[0][0]) in whole and not _random_looking(text[crossed[0][1] : e]):
                continue
            out.append((s, e, kind))
    return out


_CONTINUATION = lazy(r"\r?\n[ \t>]*([A-Za-z0-9+/=_.-]{8,4096})(?=[ \t]*(?:\r?\n|$))")


def continued(text: str, spans: list[Span]) -> list[Span]:
    """Secrets of 12+ characters that end a line and go on alone on the next one, which looks random (a
    value wrapped by an editor or a terminal: ``aws_secret_access_key = <20 characters>`` / ``<20 more>``):
    grown over the continuation lines."""
    out: list[Span] = []
    for start, end, kind in spans:
        if end - start >= 12 and kind not in ("private_key", "partial_secret"):
            while (m := _CONTINUATION.match(text, end)) is not None and _random_looking(m[1]):
                end = m.end(1)
        out.append((start, end, kind))
    return out


# -- key bodies without their BEGIN line ------------------------------------------------------------------------
_TAIL_LINE = lazy(r"[ \t]*([A-Za-z0-9+/]{4,80}={0,2})[ \t]*\r?(?:\n|$)")
_KEY_STARTS = ("MII", "b3BlbnNzaC1rZXktdjE", "AAAAB3NzaC1yc2E", "AAAAC3NzaC1lZDI1NTE5")
"""DER (PKCS#1, PKCS#8: ``MII``), ``openssh-key-v1`` and SSH key blobs: one such line is key material."""


def _body_line(line: str) -> bool:
    return mixed(line) and UPPER.search(line) is not None and any(c.islower() for c in line)


def _key_lines(text: str) -> list[tuple[int, int, int]]:
    """``(line start, body start, body end)`` of each line that is 60-80 base64 characters and nothing else."""
    masked = runs.mask(text, runs.KEY_LINE)
    lines = []
    for start, end in runs.long_runs(masked, 60):
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if end - start <= 80 and not text[line_start:start].strip() and not text[end:line_end].strip():
            if _body_line(text[start:end]):
                lines.append((line_start, start, end))
    return lines


def key_bodies(text: str) -> list[Span]:
    """Key material seen without its BEGIN line (a chunk, a pack range or a pasted fragment): two or more
    lines of 60-80 base64 characters of one width (PEM's 64, OpenSSH's 70, MIME's 76), or one such line and a
    padded last line, or one line opening like a key (``MII...``, ``b3BlbnNzaC1rZXktdjE...``). A run right
    after a line ending in ``base64,`` (a data: URI wrapped) is an image, not a key."""
    groups: list[list[tuple[int, int, int]]] = []
    for line in _key_lines(text):
        prev = groups[-1][-1] if groups else None
        if prev is not None and text.find("\n", prev[2]) + 1 == line[0] and line[2] - line[1] == prev[2] - prev[1]:
            groups[-1].append(line)
        else:
            groups.append([line])
    spans: list[Span] = []
    for group in groups:
        (line_start, first, _), (_, last_start, end) = group[0], group[-1]
        if text[:line_start].rstrip().endswith("base64,"):
            continue
        next_line = text.find("\n", end) + 1
        tail = _TAIL_LINE.match(text, next_line) if 0 < next_line < len(text) else None
        width = end - last_start
        padded = tail is not None and len(tail[1]) <= width and tail[1].endswith("=")
        if tail is not None and len(tail[1]) <= width and (padded or len(group) >= 2):
            end = tail.end(1)
        if len(group) >= 2 or padded or text.startswith(_KEY_STARTS, first):
            spans.append((first, end, "private_key"))
    return spans


# -- base64 of a secret ---------------------------------------------------------------------------------------
_HEX = lazy(r"[0-9a-fA-F]+")
_B64_ASCII = "IJKLMNOPQRSTUVWXYZabcdef"
_CONTROL = lazy(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_MAX_DECODED = 1 << 16


def encoded_spans(text: str, find: Callable[[str], list[Span]], skip: list[Span]) -> list[Span]:
    """Runs of 24+ base64 (or base64url) characters, or 40+ hexadecimal ones, whose decoding is printable text
    holding a secret (``base64("sk-proj-...")``, an encoded ``.env`` line): the whole run, with the kind found
    inside. A git hash or a checksum decodes to bytes that are no text, and stays."""
    out: list[Span] = []
    taken = sorted((s, e) for s, e, _ in skip)
    starts = [s for s, _ in taken]
    for start, end in runs.long_runs(runs.mask(text, runs.BASE64), 24):
        run = text[start:end]
        # text encodes to runs with tell-tale characters: every hex pair of an ASCII byte starts with 2-7,
        # every 4th base64 character of ASCII text is one of I-Z a-f; hashes and ids fail at once
        hexadecimal = len(run) >= 40 and len(run) % 2 == 0 and _HEX.fullmatch(run) is not None
        if hexadecimal:
            if run[0:32:2].strip("234567"):
                continue
        elif run[0:48:4].strip(_B64_ASCII) or UPPER.search(run) is None or not mixed(run):
            continue
        if end - start > _MAX_DECODED:
            continue
        i = bisect.bisect_right(starts, start) - 1
        if i >= 0 and taken[i][1] >= end:  # inside a secret found already (spans found so far do not nest)
            continue
        padding = len(text[end : end + 2]) - len(text[end : end + 2].lstrip("="))
        try:
            if hexadecimal:
                raw = bytes.fromhex(run)
            else:
                altchars = b"-_" if "-" in run or "_" in run else None
                raw = base64.b64decode(run + "=" * (-len(run) % 4), altchars=altchars)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if not decoded or _CONTROL.search(decoded):
            continue
        inner = find(decoded)
        if inner:
            out.append((start, end + padding, inner[0][2]))
    return out


# -- the rest of a secret glued to another redactor's marker ---------------------------------------------------
def glued_spans(text: str, lowered: str) -> list[Span]:
    """``Bearer [redacted]kQ9...``: a proxy redacted the part of a token it saw in one stream event and the rest
    came in the next. The marker and the rest become one span (kind ``partial_secret``)."""
    out: list[Span] = []
    for pattern in GLUED:
        for m in pattern.finditer(lowered):
            marker = lowered[m.start() : m.start(1)]
            if glued_remainder(marker, text[m.start(1) : m.end(1)], text[m.end() : m.end() + 1]):
                out.append((m.start(), m.end(), "partial_secret"))
    return out
