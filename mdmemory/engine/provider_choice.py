"""Which embedding provider an agent's ``Memory`` uses, and when that changes.

The configured provider (``auto`` resolved), or the fallback that took over after it kept failing and
stays in charge, in every process, for ``FALLBACK_RETRY_SECONDS`` (the state lives in the index's meta);
a provider that cannot be created leaves search keyword-only and is tried again every
``PROVIDER_RETRY_SECONDS``. Each provider gets the circuit breaker shared through the index.
``Memory`` inherits this; it owns the attributes declared below.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mdmemory.config.load import AgentConfig, MemorySearchConfig
from mdmemory.providers import deadline
from mdmemory.store.faults import store_errors
from mdmemory.util.errors import ProviderError, StoreError

# The providers and the store are imported when a provider is first chosen: ``mdmemory get`` (a ``Memory``
# that never embeds nor opens its index) then pays for neither.
if TYPE_CHECKING:
    from mdmemory.index.indexer import Indexer
    from mdmemory.providers.base import EmbeddingProvider
    from mdmemory.providers.breaker import CircuitBreaker
    from mdmemory.providers.factory import ProviderChoice
    from mdmemory.store.api import IndexStore

FALLBACK_RETRY_SECONDS = 3600.0  # how long a fallback that took over stays in charge before the primary is retried
PROVIDER_RETRY_SECONDS = 30.0  # how often a provider that could not be created (no key, no model) is tried again


class ProviderSelection:
    """The provider half of ``Memory``."""

    agent: AgentConfig
    settings: MemorySearchConfig
    env: Mapping[str, str]
    provider_error: ProviderError | None
    _choice: ProviderChoice | None
    _choice_at: float
    _indexer: Indexer | None

    @property
    def store(self) -> IndexStore:  # provided by Memory
        raise NotImplementedError

    @property
    def choice(self) -> ProviderChoice:
        """The provider in use. One that cannot be created (no API key, no model file) and has no fallback
        leaves search keyword-only, with the reason in ``hint``; creating it is tried again every
        ``PROVIDER_RETRY_SECONDS``."""
        retry = self.provider_error is not None and time.monotonic() - self._choice_at > PROVIDER_RETRY_SECONDS
        if self._choice is None or retry:
            from mdmemory.providers.factory import ProviderChoice, choose

            try:
                self._choice = self._persisted_fallback() or choose(self.settings, self.agent.home, self.env)
                self.provider_error = None
            except ProviderError as exc:
                self.provider_error = exc
                hint = f"provider unavailable: {exc}; searching by keywords only until it is fixed"
                self._choice = ProviderChoice(None, self.settings.provider, hint=hint)
            self._choice_at = time.monotonic()
            self._indexer = None
        if self._choice.provider is not None and self._choice.provider.breaker is None:
            self._choice.provider.breaker = self._breaker(self._choice.provider)
        return self._choice

    def follow(self, other: ProviderSelection) -> None:
        """Use the provider choice ``other`` (another connection to the same agent's index) uses now: after a
        fallback took over there, the same one here, so that both write the same vectors."""
        if other._choice is not None and other._choice is not self._choice:
            self._choice = other._choice
            self._indexer = None

    def _breaker(self, provider: EmbeddingProvider) -> CircuitBreaker:
        """The provider's circuit breaker on this index, shared with other processes (providers/breaker.py)."""
        from mdmemory.providers.breaker import BreakerPolicy, breaker_for

        b = self.settings.breaker
        policy = BreakerPolicy(b.failures, b.cool_down_seconds, b.max_cool_down_seconds)
        return breaker_for(self.agent.store_path, provider.provider_key, provider.id, provider.model, policy)

    def _persisted_fallback(self) -> ProviderChoice | None:
        """A fallback that took over recently stays in charge (in every process) until its cool-down ends."""
        from mdmemory.providers.factory import ProviderChoice, build

        try:
            state = self.store.get_meta("fallback")
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

    def _take_over(self, exc: ProviderError) -> bool:
        """Switch to the configured fallback after the primary kept failing; False if there is none."""
        current = self.choice
        target = self.settings.fallback
        if target == "none" or target == current.name or current.fallback:
            return False
        if deadline.current() is not None:  # inside a search's time budget: the next sync switches and rebuilds
            return False
        from mdmemory.providers.factory import ProviderChoice, build

        try:
            provider = build(target, self.settings, self.agent.home, self.env)
        except ProviderError:
            return False
        if current.provider is not None:
            current.provider.close()
        self._choice = ProviderChoice(provider, current.requested, fallback={"from": current.name, "reason": str(exc)})
        self._indexer = None
        return True

    def _follow_shared_state(self) -> None:
        """Pick up a swapped index, and drop a fallback that another process has already ended."""
        self.store.refresh()
        if self._choice is not None and self._choice.fallback is not None:
            state = self.store.get_meta("fallback")
            if state is None or _expired(state):
                if self._choice.provider is not None:
                    self._choice.provider.close()
                self._choice = None
                self._indexer = None

    def _record_fallback(self) -> None:
        fb = self.choice.fallback
        state = self.store.get_meta("fallback")
        if fb is None:
            if state is not None:
                self.store.delete_meta("fallback")
        elif state is None or state.get("from") != fb["from"] or _expired(state):
            self.store.set_meta("fallback", {**fb, "to": self.choice.name, "at": time.time()})


def _expired(state: dict[str, Any]) -> bool:
    return time.time() - float(state.get("at", 0)) > FALLBACK_RETRY_SECONDS
