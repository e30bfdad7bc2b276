"""Which embedding provider an agent's engine uses, and when that changes.

The configured provider (``auto`` resolved), or the fallback that took over after it kept failing and
stays in charge, in every process, for ``FALLBACK_RETRY_SECONDS`` (the state lives in the index's meta);
a provider that cannot be created leaves search keyword-only and is tried again every
``PROVIDER_RETRY_SECONDS``. Each provider gets the circuit breaker shared through the index.

``ProviderChoiceKeeper`` holds one engine's choice; ``SharedProviders`` the choices the engines of one
process share (agents with the same provider settings load one model).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mdmem.config.load import AgentConfig
from mdmem.providers import deadline
from mdmem.store.faults import store_errors
from mdmem.util.errors import ProviderError, StoreError

# The providers and the store are imported when a provider is first chosen: ``mdmem get`` (an engine
# that never embeds nor opens its index) then pays for neither.
if TYPE_CHECKING:
    from mdmem.providers.base import EmbeddingProvider
    from mdmem.providers.breaker import CircuitBreaker
    from mdmem.providers.factory import ProviderChoice
    from mdmem.store.api import IndexStore

FALLBACK_RETRY_SECONDS = 3600.0  # how long a fallback that took over stays in charge before the primary is retried
PROVIDER_RETRY_SECONDS = 30.0  # how often a provider that could not be created (no key, no model) is tried again


class ProviderChoiceKeeper:
    """One engine's provider choice, made on first use; ``version`` changes whenever the choice does (the
    index keeper then builds its indexer again)."""

    def __init__(
        self,
        agent: AgentConfig,
        env: Mapping[str, str],
        store: Callable[[], IndexStore],
        choice: ProviderChoice | None = None,
    ) -> None:
        self.agent = agent
        self.settings = agent.memory_search
        self.env = env
        self._store = store  # the index, opened lazily by its keeper
        self._choice = choice
        self._at = 0.0
        self.provider_error: ProviderError | None = None  # why the configured provider could not be created
        self.version = 0

    @property
    def current(self) -> ProviderChoice | None:
        """The choice in use, without making one."""
        return self._choice

    @property
    def choice(self) -> ProviderChoice:
        """The provider in use. One that cannot be created (no API key, no model file) and has no fallback
        leaves search keyword-only, with the reason in ``hint``; creating it is tried again every
        ``PROVIDER_RETRY_SECONDS``."""
        retry = self.provider_error is not None and time.monotonic() - self._at > PROVIDER_RETRY_SECONDS
        if self._choice is None or retry:
            from mdmem.providers.factory import ProviderChoice, choose

            try:
                made = self._persisted_fallback() or choose(self.settings, self.agent.home, self.env)
                self.provider_error = None
            except ProviderError as exc:
                self.provider_error = exc
                hint = f"provider unavailable: {exc}; searching by keywords only until it is fixed"
                made = ProviderChoice(None, self.settings.provider, hint=hint)
            self._set(made)
            self._at = time.monotonic()
        assert self._choice is not None
        if self._choice.provider is not None and self._choice.provider.breaker is None:
            self._choice.provider.breaker = self.breaker_for(self._choice.provider)
        return self._choice

    def adopt(self, choice: ProviderChoice | None) -> None:
        """Use ``choice`` (one another engine or the process owns: closing is theirs), or none (the next use
        makes one)."""
        if choice is not self._choice:
            self._set(choice)

    def follow(self, other: ProviderChoiceKeeper) -> None:
        """Use the choice ``other`` (another connection to the same agent's index) uses now: after a fallback
        took over there, the same one here, so that both write the same vectors."""
        if other.current is not None:
            self.adopt(other.current)

    def close(self, provider: bool = True) -> None:
        """Close the provider in use, or (``provider=False``: it is shared) only let go of it."""
        if not provider:
            self._set(None)
        elif self._choice is not None and self._choice.provider is not None:
            self._choice.provider.close()

    def breaker_for(self, provider: EmbeddingProvider) -> CircuitBreaker:
        """The provider's circuit breaker on this index, shared with other processes (providers/breaker.py)."""
        from mdmem.providers.breaker import BreakerPolicy, breaker_for

        b = self.settings.breaker
        policy = BreakerPolicy(b.failures, b.cool_down_seconds, b.max_cool_down_seconds)
        return breaker_for(self.agent.store_path, provider.provider_key, provider.id, provider.model, policy)

    def take_over(self, exc: ProviderError) -> bool:
        """Switch to the configured fallback after the primary kept failing; False if there is none."""
        current = self.choice
        target = self.settings.fallback
        if target == "none" or target == current.name or current.fallback:
            return False
        if deadline.current() is not None:  # inside a search's time budget: the next sync switches and rebuilds
            return False
        from mdmem.providers.factory import ProviderChoice, build

        try:
            provider = build(target, self.settings, self.agent.home, self.env)
        except ProviderError:
            return False
        if current.provider is not None:
            current.provider.close()
        self._set(ProviderChoice(provider, current.requested, fallback={"from": current.name, "reason": str(exc)}))
        return True

    def follow_shared_state(self) -> None:
        """Pick up a swapped index, and drop a fallback that another process has already ended."""
        store = self._store()
        store.refresh()
        if self._choice is not None and self._choice.fallback is not None:
            state = store.get_meta("fallback")
            if state is None or _expired(state):
                if self._choice.provider is not None:
                    self._choice.provider.close()
                self._set(None)

    def record_fallback(self) -> None:
        """Keep a fallback that took over where every process finds it (the index's meta), or end it there."""
        fb = self.choice.fallback
        store = self._store()
        state = store.get_meta("fallback")
        if fb is None:
            if state is not None:
                store.delete_meta("fallback")
        elif state is None or state.get("from") != fb["from"] or _expired(state):
            store.set_meta("fallback", {**fb, "to": self.choice.name, "at": time.time()})

    def _set(self, choice: ProviderChoice | None) -> None:
        self._choice = choice
        self.version += 1

    def _persisted_fallback(self) -> ProviderChoice | None:
        """A fallback that took over recently stays in charge (in every process) until its cool-down ends."""
        from mdmem.providers.factory import ProviderChoice, build

        try:
            state = self._store().get_meta("fallback")
        except store_errors(StoreError):
            return None  # a broken index has no fallback to keep; the store's state is reported on its own
        if not state or state.get("to") != self.settings.fallback:
            return None
        if _expired(state):
            return None
        try:
            provider = build(state["to"], self.settings, self.agent.home, self.env)  # fallback: its own model
        except ProviderError:
            return None
        reason = {"from": state["from"], "reason": state["reason"]}
        return ProviderChoice(provider, self.settings.provider, fallback=reason)


def _expired(state: dict[str, Any]) -> bool:
    return time.time() - float(state.get("at", 0)) > FALLBACK_RETRY_SECONDS


def provider_key(agent: AgentConfig) -> str:
    """What two agents must have in common to share a provider: its settings (not the index, not the files)."""
    ms = agent.memory_search
    parts = (ms.enabled, ms.provider, ms.model, ms.fallback, asdict(ms.local), asdict(ms.remote))
    return json.dumps(parts, sort_keys=True, default=str)


class SharedProviders:
    """The provider choices the engines of one process share, one per ``provider_key``: a local model is
    loaded once however many agents use it. The first choice remembered for a key is the one shared; the
    process closes them (``close``), an engine never closes one it got from here."""

    def __init__(self) -> None:
        self._by_key: dict[str, ProviderChoice] = {}
        self._lock = threading.Lock()

    def for_agent(self, agent: AgentConfig) -> ProviderChoice | None:
        """The choice to share with ``agent``, if one was remembered."""
        with self._lock:
            return self._by_key.get(provider_key(agent))

    def remember(self, agent: AgentConfig, choice: ProviderChoice) -> ProviderChoice:
        """Share ``choice`` with agents like ``agent`` unless one is shared already; returns the shared one."""
        with self._lock:
            return self._by_key.setdefault(provider_key(agent), choice)

    def owns(self, choice: ProviderChoice | None) -> bool:
        """Whether ``choice`` is one of the shared ones (its engine must not close it)."""
        with self._lock:
            return choice is not None and any(c is choice for c in self._by_key.values())

    def choices(self) -> list[ProviderChoice]:
        with self._lock:
            return list(self._by_key.values())

    def close(self) -> None:
        """Close every shared provider once."""
        with self._lock:
            choices, self._by_key = list(self._by_key.values()), {}
        closed: set[int] = set()
        for choice in choices:
            if choice.provider is not None and id(choice.provider) not in closed:
                closed.add(id(choice.provider))
                choice.provider.close()
