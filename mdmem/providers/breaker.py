"""A circuit breaker for embedding providers, shared by every process that uses the same index.

After ``failures`` consecutive failed calls (each call has already retried within its own time budget) the
breaker *opens*: calls are refused at once with ``ProviderPaused`` for ``coolDownSeconds``. Then it is
*half-open*: one call, the probe, goes through while the others are still refused; the probe's success closes
the breaker, its failure opens it again for twice as long, up to ``maxCoolDownSeconds``. Any success closes it.

The state lives in a small JSON file beside the index, ``<store path>.breaker.json``, keyed by the provider
key (a hash of provider, model and non-secret settings, never the API key), so CLI searches, the MCP server
and the watch daemon pause together. The file is replaced atomically (temporary file + rename) and re-read
only when it changed; when it cannot be written (a read-only store) the breaker still works within the
process. Probing across processes is best effort: two processes that see the pause end at the same instant
may both probe. Times in the file are Unix times (every process on the machine shares the clock)::

    {"version": 1, "providers": {"<providerKey>": {
        "provider": "openai", "model": "text-embedding-3-small",
        "state": "open",             # "closed" or "open" ("half-open" is open past "until")
        "failures": 2,               # consecutive failed calls
        "until": 1767225630.0,       # when the pause ends
        "coolDownSeconds": 30.0,     # length of the current pause
        "reason": "openai embeddings failed after 1 attempt(s) in 2.0s: ...",
        "probeUntil": null,          # a half-open probe is running until then
        "updatedAt": 1767225600.0}}}
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mdmem.util.errors import ProviderPaused

VERSION = 1
MAX_REASON = 500


@dataclass(frozen=True)
class BreakerPolicy:
    """When the breaker opens (``failures`` in a row) and how long it pauses (doubling up to the cap)."""

    failures: int = 2
    cool_down: float = 30.0
    max_cool_down: float = 300.0


@dataclass
class _State:
    provider: str
    model: str
    state: str = "closed"
    failures: int = 0
    until: float | None = None
    coolDownSeconds: float | None = None  # noqa: N815 - the file's JSON keys
    reason: str | None = None
    probeUntil: float | None = None  # noqa: N815
    updatedAt: float = 0.0  # noqa: N815

    @classmethod
    def parse(cls, raw: Any, provider: str, model: str) -> _State | None:
        """The entry as written by any process, or None when it is not one (a damaged or foreign file)."""
        if not isinstance(raw, dict) or raw.get("state") not in ("closed", "open"):
            return None
        try:
            return cls(
                provider,
                model,
                state=raw["state"],
                failures=int(raw.get("failures") or 0),
                until=_number(raw.get("until")),
                coolDownSeconds=_number(raw.get("coolDownSeconds")),
                reason=str(raw["reason"])[:MAX_REASON] if raw.get("reason") is not None else None,
                probeUntil=_number(raw.get("probeUntil")),
                updatedAt=_number(raw.get("updatedAt")) or 0.0,
            )
        except (TypeError, ValueError):
            return None


class CircuitBreaker:
    """One provider's breaker for one index. Thread-safe; share it with ``breaker_for``."""

    def __init__(
        self,
        path: Path | None,
        key: str,
        provider: str,
        model: str,
        policy: BreakerPolicy = BreakerPolicy(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.key = key
        self.policy = policy
        self._clock = clock
        self._state = _State(provider, model)
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    # -- the three moments of a call -----------------------------------------------------------------
    def admit(self, lease: float) -> bool:
        """Let a call through, or raise ``ProviderPaused``. True when the call is the half-open probe.

        ``lease``: the longest the call can take; other callers wait that long for a probe that never reports.
        """
        with self._lock:
            s = self._refresh()
            if s.state == "closed":
                return False
            now = self._clock()
            until = s.until or 0.0
            if now < until:
                raise self._paused(s, until, now)
            if s.probeUntil is not None and now < s.probeUntil:
                raise self._paused(s, s.probeUntil, now, probing=True)
            s.probeUntil = now + max(1.0, lease)
            self._save(s)
            return True

    def succeeded(self, probe: bool) -> None:
        """The call worked: the breaker closes (a file write only when it was not already closed)."""
        with self._lock:
            s = self._refresh()
            if s.state == "closed" and s.failures == 0:
                return
            self._save(_State(s.provider, s.model))

    def failed(self, probe: bool, reason: str) -> None:
        """The call failed (after its retries): count it, open the breaker or lengthen the pause."""
        with self._lock:
            s = self._refresh()
            now = self._clock()
            s.failures += 1
            s.reason = reason[:MAX_REASON]
            if s.state == "open" and probe:  # the probe failed: pause again, twice as long
                cap = max(self.policy.cool_down, self.policy.max_cool_down)
                s.coolDownSeconds = min(cap, 2 * (s.coolDownSeconds or self.policy.cool_down))
                s.until = now + s.coolDownSeconds
                s.probeUntil = None
            elif s.state == "closed" and s.failures >= self.policy.failures:
                s.state, s.coolDownSeconds = "open", self.policy.cool_down
                s.until = now + s.coolDownSeconds
            self._save(s)

    def released(self, probe: bool) -> None:
        """The call ended without an outcome (no time left to try): a probe gives its turn back."""
        if not probe:
            return
        with self._lock:
            s = self._refresh()
            if s.probeUntil is not None:
                s.probeUntil = None
                self._save(s)

    # -- reporting -----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """``{state: closed|open|half-open, until: ISO time or None, reason, failures}``."""
        with self._lock:
            s = self._refresh()
            if s.state == "closed":
                return {"state": "closed", "until": None, "reason": s.reason, "failures": s.failures}
            until = s.until or 0.0
            state = "open" if self._clock() < until else "half-open"
            return {"state": state, "until": _iso(until), "reason": s.reason, "failures": s.failures}

    def _paused(self, s: _State, until: float, now: float, probing: bool = False) -> ProviderPaused:
        what = "a probe call is testing it" if probing else f"after {s.failures} failed call(s)"
        message = (
            f"{s.provider} embeddings are paused until {_iso(until)} ({until - now:.0f} s left), {what}; "
            f"last error: {s.reason}. They resume by themselves (memorySearch.breaker sets the pause)"
        )
        return ProviderPaused(message, until=until, reason=s.reason or "")

    # -- the shared file -----------------------------------------------------------------------------
    def _refresh(self) -> _State:
        """The newest state: this process's, or the file's when another process wrote it since."""
        if self.path is None:
            return self._state
        try:
            st = os.stat(self.path)
        except OSError:
            return self._state
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen != self._seen:
            self._seen = seen
            raw = _read(self.path).get(self.key)
            theirs = _State.parse(raw, self._state.provider, self._state.model)
            if theirs is not None and theirs.updatedAt >= self._state.updatedAt:
                self._state = theirs
        return self._state

    def _save(self, s: _State) -> None:
        s.updatedAt = max(self._clock(), self._state.updatedAt + 1e-6)
        self._state = s
        if self.path is None:
            return
        tmp = None
        try:
            providers = _read(self.path)
            providers[self.key] = asdict(s)
            data = {"version": VERSION, "providers": providers}
            fd, tmp = tempfile.mkstemp(prefix=f"{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
            tmp = None
            st = os.stat(self.path)
            self._seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            pass  # a read-only store: the breaker still works within this process
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


_BREAKERS: weakref.WeakValueDictionary[tuple[str, str], CircuitBreaker] = weakref.WeakValueDictionary()
_BREAKERS_LOCK = threading.Lock()


def breaker_path(store_path: Path) -> Path:
    """The shared state file of the index at ``store_path``: ``<store path>.breaker.json``."""
    return Path(f"{store_path}.breaker.json")


def breaker_for(store_path: Path, key: str, provider: str, model: str, policy: BreakerPolicy) -> CircuitBreaker:
    """The breaker of provider ``key`` on the index at ``store_path``; one object per pair in this process."""
    path = breaker_path(store_path)
    with _BREAKERS_LOCK:
        breaker = _BREAKERS.get((str(path), key))
        if breaker is None:
            breaker = CircuitBreaker(path, key, provider, model, policy)
            _BREAKERS[(str(path), key)] = breaker
        breaker.policy = policy
        return breaker


def _read(path: Path) -> dict[str, Any]:
    """The ``providers`` map of the file; empty when it is missing, unreadable or not ours."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    providers = data.get("providers") if isinstance(data, dict) and data.get("version") == VERSION else None
    return dict(providers) if isinstance(providers, dict) else {}


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
