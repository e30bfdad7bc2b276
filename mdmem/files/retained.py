"""What a retain stores of a proxy entry, pure: its turn, redacted, dated in the agent's time zone, each part
within the per-message cap, and what the answer says about it (warnings, what was cut).

- **The turn**: the last user message, the assistant's final text and its tool calls (mdmem.files.turns
  ``turn_of``); never the conversation before it, which earlier turns retained. An entry without any of them
  is refused (400 naming ``entry``): there is nothing to recall.
- **Time zone**: ``metadata.timezone`` as the proxy passes it on, unchecked. An IANA name is used; one in the
  wrong case (``europe/lisbon``) is read as the name it matches; anything else (``Mars/Olympus_Mons``,
  ``UTC+5``, ``+05:00``) dates the turn in UTC, as the proxy's own time line falls back, with a warning: a
  bad time zone never costs the turn.
- **Long lines wrapped**: a line over ``WRAP_CHARS`` characters (a message pasted as one paragraph) is wrapped
  at a sentence end, else at a space, outside code blocks and tables and never so that a new line would start
  a list, a quote or a heading. Markdown shows the paragraph as before, and each part of it can be searched,
  packed and recalled on its own (a pack item is made of whole lines: a 20 KB line would never fit a recall).
- **Per-message cap**: each part (user, assistant, tool calls) is stored whole up to ``max_chars`` characters
  (``service.maxMessageChars``). A longer one keeps its first three quarters and its last quarter of the cap
  (the question at the end of a long paste survives) with a line in between saying how much was cut, and the
  answer lists it (``truncated``). Secrets are redacted before the cut, around what is kept, so a cut never
  leaves part of a secret.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from mdmem.config.load import ServiceConfig
from mdmem.files import sessionblocks as blocks
from mdmem.files.entry_id import entry_id
from mdmem.files.turns import Turn, check_time, empty_turn, turn_of
from mdmem.util.redaction import find_secrets, marker, redact

DEFAULT_MAX_MESSAGE_CHARS = ServiceConfig.max_message_chars
REDACT_MARGIN = 64 * 1024  # text read past each end of what a cut message keeps, so a secret across it is seen
_PARTS = ("user", "assistant", "tools")
WRAP_CHARS = 500  # a stored line longer than this is wrapped (lines of 250 to 1,000 characters, most near 500)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"[.!?\u2026][\"')\]\u201d\u2019]*(?=[ \t])|[\u3002\uff01\uff1f]")
_SPACE = re.compile(r"[ \t]+")
_CJK_BREAK = re.compile(r"[\u3001\uff0c\uff1b\uff1a]")
# what would turn a wrapped line into another block: a list item, a quote, a heading, a table row, a fence
_BLOCK_START = re.compile(r"[-+*>#=|]|\d{1,9}[.)](?:[ \t]|$)|`{3}|~{3}")


@dataclass(frozen=True)
class Cut:
    """One part of a turn stored cut: ``chars`` long as received, its first ``head`` and last ``tail`` kept."""

    part: str
    chars: int
    head: int
    tail: int

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "chars": self.chars, "keptHead": self.head, "keptTail": self.tail}


@dataclass(frozen=True)
class Prepared:
    """A retain's block, ready to append, and what its answer says besides the status."""

    entry_id: str
    day: str
    block: str
    warnings: tuple[str, ...] = ()  # for the client: each names the field and the fix
    notes: tuple[str, ...] = ()  # for telemetry: short codes, never a value the client sent
    cuts: tuple[Cut, ...] = field(default=())


def time_zone(name: Any) -> tuple[tzinfo, str | None, str | None]:
    """``(zone, warning, code)`` for ``metadata.timezone``: the zone and no warning for an IANA name (or none
    given); the name it matches for one in the wrong case; else UTC, with a warning naming the field."""
    if not isinstance(name, str) or not name.strip():
        return UTC, None, None
    name = name.strip()
    found = _zone(name)
    if found is not None:
        return found, None, None
    shown = redact(name[:60])  # the client's own value, echoed: still never a secret in an answer
    canonical = _by_lower_case().get(name.lower())
    if canonical is not None and (found := _zone(canonical)) is not None:
        warning = f"metadata.timezone: {shown!r} read as {canonical!r}. Fix: write it so in the agent's metadata"
        return found, warning, "timezone_case"
    warning = (
        f"metadata.timezone: {shown!r} is not an IANA time zone name; the turn is dated in UTC. Fix: set the "
        "agent's timezone to a name such as 'Europe/Lisbon' or 'America/New_York' (not an offset such as UTC+5)"
    )
    return UTC, warning, "timezone_unknown"


def _zone(name: str) -> tzinfo | None:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        return None  # unknown; a path, a folder ("Europe") or a file that is no zone


@functools.cache
def _by_lower_case() -> dict[str, str]:
    return {name.lower(): name for name in zoneinfo.available_timezones()}


def entry_time(entry: dict[str, Any], metadata: dict[str, Any]) -> tuple[datetime, str | None, str | None]:
    """The entry's ``ts`` in ``metadata.timezone`` (see ``time_zone``), with its warning and code."""
    ts = check_time(str(entry.get("ts")), "entry.ts")
    zone, warning, code = time_zone(metadata.get("timezone"))
    return ts.astimezone(zone), warning, code


def stored_text(text: str, max_chars: int) -> tuple[str, tuple[int, int, int] | None]:
    """``text`` as a block stores it: redacted, line endings normalised (``blocks.clean``), long lines wrapped
    (``wrapped``), whole when it has at most ``max_chars`` characters, else its first and last parts with a
    line saying what was cut between them; and ``(chars, head, tail)`` when it was cut."""
    text = text.strip()
    if len(text) <= max_chars:
        return wrapped(blocks.clean(redact(text))), None
    tail = max_chars // 4
    head = max_chars - tail
    start = _redacted(text, 0, head)
    end = _redacted(text, len(text) - tail, len(text))
    note = (
        f"\n\n[… {len(text) - head - tail:,} characters cut here by mdmem: the message has {len(text):,}, "
        f"over service.maxMessageChars ({max_chars:,}) …]\n\n"
    )
    return wrapped(blocks.clean(start.rstrip() + note + end.lstrip())), (len(text), head, tail)


def wrapped(text: str, width: int = WRAP_CHARS) -> str:
    """``text`` with its lines over ``width`` characters wrapped (see the module docstring); lines in fenced or
    indented code and table rows are left as they are."""
    if len(text) <= width:
        return text
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m:
            fence = None if fence and m[1][0] == fence[0] and len(m[1]) >= len(fence) else fence or m[1]
        if m or fence is not None or len(line) <= width or line.startswith(("    ", "\t", "|")):
            out.append(line)
        else:
            out.extend(_wrap_line(line, width))
    return "\n".join(out)


def _wrap_line(line: str, width: int) -> list[str]:
    pieces: list[str] = []
    pos = 0
    while len(line) - pos > width:
        cut = _break(line, pos, width)
        if cut is None:
            break  # one unbroken token to the end of the line
        pieces.append(line[pos:cut].rstrip())
        pos = _after_space(line, cut)
    pieces.append(line[pos:])
    return pieces


def _break(line: str, pos: int, width: int) -> int | None:
    """Where to end the piece of ``line`` that starts at ``pos``: the sentence end nearest ``pos + width``
    within half a width before it and a width after it, else the last space in the second half of the width,
    else after CJK punctuation there; a run of CJK text is cut at the width, a long token (a URL, a blob) at
    the space after it. Never where the next piece would start another Markdown block."""
    lo, target, hi = pos + width // 2, pos + width, min(len(line), pos + 2 * width)

    def ok(cut: int) -> bool:
        return _BLOCK_START.match(line, _after_space(line, cut)) is None

    ends = [m.end() for m in _SENTENCE_END.finditer(line, lo, hi) if ok(m.end())]
    if ends:
        return min(ends, key=lambda e: abs(e - target))
    spaces = [m.start() for m in _SPACE.finditer(line, lo, target) if ok(m.start())]
    if spaces:
        return spaces[-1]
    marks = [m.end() for m in _CJK_BREAK.finditer(line, lo, target) if ok(m.end())]
    if marks:
        return marks[-1]
    if sum(ch > "\u2e7f" for ch in line[pos:target]) > width // 2:
        return target  # CJK text: no spaces to wait for
    after = _SPACE.search(line, target)
    return after.start() if after is not None and ok(after.start()) else None


def _after_space(line: str, i: int) -> int:
    m = _SPACE.match(line, i)
    return m.end() if m else i


def _redacted(text: str, start: int, end: int) -> str:
    """``text[start:end]`` redacted as part of ``text``: secrets are looked for up to ``REDACT_MARGIN`` beyond
    each end, and one that crosses an end becomes its marker (no piece of it is kept)."""
    lo, hi = max(0, start - REDACT_MARGIN), min(len(text), end + REDACT_MARGIN)
    parts: list[str] = []
    pos = start
    for s, e, kind in find_secrets(text[lo:hi]):
        s, e = s + lo, e + lo
        if e <= start or s >= end:
            continue
        parts.append(text[pos : max(s, pos)])
        parts.append(marker(kind))
        pos = min(e, end)
    parts.append(text[pos:end])
    return "".join(parts)


def prepare(entry: dict[str, Any], metadata: dict[str, Any], max_chars: int = DEFAULT_MAX_MESSAGE_CHARS) -> Prepared:
    """The block ``entry`` is stored as (see the module docstring); InvalidArgumentError naming the field for an
    entry with nothing to retain or a bad ``ts``."""
    turn = turn_of(entry)
    if not (turn.user or turn.assistant or turn.tools):
        raise empty_turn(entry)
    eid = entry_id(entry)
    when, warning, code = entry_time(entry, metadata)
    kept: list[str] = []
    cuts: list[Cut] = []
    for part, text in zip(_PARTS, (turn.user, turn.assistant, ", ".join(turn.tools)), strict=True):
        stored, cut = stored_text(text, max_chars)
        kept.append(stored)
        if cut is not None:
            cuts.append(Cut(part, *cut))
    warnings = [warning] if warning else []
    warnings += [
        f"entry: the {c.part} message has {c.chars:,} characters, over service.maxMessageChars ({max_chars:,}): "
        f"its first {c.head:,} and last {c.tail:,} are stored"
        for c in cuts
    ]
    notes = ([code] if code else []) + [f"truncated_{c.part}" for c in cuts]
    model = entry.get("effective_model") or entry.get("requested_model") or metadata.get("requested_model")
    stored_turn = Turn(kept[0], kept[1], (kept[2],) if kept[2] else ())
    block = blocks.render(eid, when.strftime("%H:%M:%S"), redact(str(model or "")), stored_turn)
    return Prepared(eid, when.date().isoformat(), block, tuple(warnings), tuple(notes), tuple(cuts))


def render_entry(entry: dict[str, Any], metadata: dict[str, Any]) -> tuple[str, str, str]:
    """``(entry id, day, block)`` of ``prepare`` with the default cap."""
    p = prepare(entry, metadata)
    return p.entry_id, p.day, p.block
