"""The embedding provider interface.

Subclasses implement one method, ``embed_batch``: embed a list of texts that already fit the provider's
limits and return one vector per text. Everything else lives here once: text sanitising, truncation to
``max_input_tokens`` with the provider's own token counter, batching by count and by tokens, retries with
exponential backoff and jitter on ``TransientProviderError`` (honouring ``retry_after``), result
validation (count, dimension, finite values) and L2 normalisation.

Time: each batch's retries stop at ``RetryPolicy.max_total_seconds`` or at the deadline in force
(``deadline.until``), whichever comes first; no attempt or backoff sleep is started that would end past it
(a provider with ``enforces_deadline`` cuts its request at ``deadline.time_left()``). ``embed_query_within``
bounds a query embedding for any provider. A ``breaker`` (``breaker.CircuitBreaker``), when attached, is
asked before each batch and told its outcome, so a provider that keeps failing is paused for every caller.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from mdmem.providers import deadline
from mdmem.providers.breaker import CircuitBreaker
from mdmem.util.errors import InputRejected, ProviderError, TransientProviderError
from mdmem.util.tokens import estimate_tokens, truncate_to_tokens

if TYPE_CHECKING:
    from concurrent.futures import Future

    import numpy as np  # imported by the methods that make vectors: a keyword-only process never needs it

    from mdmem.providers.token_vectors import TokenVectors

MIN_ATTEMPT_SECONDS = 0.05
"""No attempt is started with less time than this left before the deadline."""
_WORKERS_LOCK = threading.Lock()
_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: at most ``max_retries`` retries within ``max_total_seconds``."""

    max_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_total_seconds: float = 120.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based): full-jitter backoff or Retry-After."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay)
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(cap / 2, cap)


def sanitize_text(text: str) -> str:
    """Make any Python string safe to send: lone surrogates replaced, NUL removed."""
    if not isinstance(text, str):
        text = str(text)
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", " ")


class EmbeddingProvider(ABC):
    """Base class of every embedding provider.

    Class attributes a subclass sets (or overrides as properties):

    - ``id``: provider name as in config (``"local"``, ``"openai"``, ``"hash"``).
    - ``model``: model name or path identity.
    - ``dims``: vector dimension; may be ``None`` until the model is loaded or first called.
    - ``max_input_tokens``: longest input the model accepts; longer inputs are truncated, never rejected.
    - ``max_batch_size``: most inputs per ``embed_batch`` call.
    - ``max_batch_tokens``: most total tokens per ``embed_batch`` call (``None``: no limit).
    - ``enforces_deadline``: True when ``embed_batch`` itself stops by ``deadline.time_left()`` (remote).
    - ``token_embeddings``: True when it gives per-token embeddings for late chunking (local); None while
      not known (a remote server is asked by ``token_context``).
    """

    id: str = "base"
    model: str = ""
    dims: int | None = None
    max_input_tokens: int = 8192
    max_batch_size: int = 64
    max_batch_tokens: int | None = None
    retry: RetryPolicy = RetryPolicy()
    sleep: Callable[[float], None] = staticmethod(time.sleep)
    enforces_deadline: bool = False
    token_embeddings: bool | None = False  # gives per-token embeddings (``token_context``, ``embed_token_batch``)
    breaker: CircuitBreaker | None = None
    _overrun: Future[np.ndarray] | None = None  # a query whose caller stopped waiting for it

    # -- the one method a provider implements -------------------------------------------------------
    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> Sequence[Sequence[float]] | np.ndarray:
        """Embed ``texts`` (already sanitised, truncated and within batch limits): one vector each.

        Raise ``TransientProviderError`` for failures worth retrying, ``ProviderError`` otherwise.
        """

    # -- hooks with sensible defaults ---------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` costs for this model. Providers with a real tokenizer override this."""
        return estimate_tokens(text)

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """``count_tokens`` of each text; a provider whose counter has a per-call cost counts them at once."""
        return [self.count_tokens(t) for t in texts]

    def truncate(self, text: str) -> str:
        """Cut ``text`` to at most ``max_input_tokens`` tokens."""
        return truncate_to_tokens(text, self.max_input_tokens, self.count_tokens)

    def truncate_all(self, texts: Sequence[str]) -> list[str]:
        """``truncate`` of each text (a provider may count them in one batch first)."""
        return [self.truncate(t) for t in texts]

    def prepare_document(self, text: str) -> str:
        """Text as sent for a document (a provider may add a prefix such as ``"search_document: "``)."""
        return text

    def prepare_query(self, text: str) -> str:
        """Text as sent for a query (a provider may add a prefix such as ``"search_query: "``)."""
        return text

    def identity(self) -> dict[str, object]:
        """Non-secret settings that change the vectors (base URL, dimensions, prefixes...)."""
        return {}

    @property
    def provider_key(self) -> str:
        """Stable hash of provider, model and ``identity()``; never includes secrets."""
        blob = json.dumps({"provider": self.id, "model": self.model, **self.identity()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release the model or client. Safe to call twice."""

    def warm_up(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Build the client or load the model now: a one-time cost that no query budget counts."""

    def limit_threads(self, threads: int) -> None:  # noqa: B027 - an optional hook, not abstract
        """From now on compute on at most ``threads`` threads (a process whose other cores answer queries)."""

    def token_context(self) -> int:
        """Longest token sequence (special tokens and document prefix included) ``embed_token_documents``
        takes: the model's context. 0 when the provider gives no per-token embeddings (the default)."""
        return 0

    def embed_token_batch(self, docs: Sequence[Sequence[str]]) -> list[TokenVectors | None]:
        """Per-token vectors of each document (a list of pieces, already sanitised); None for one longer
        than ``token_context``. Only called when ``token_context`` is not 0."""
        raise ProviderError(f"{self.id} gives no per-token embeddings")

    def embed_token_documents(self, docs: Sequence[Sequence[str]]) -> list[TokenVectors | None]:
        """Per-token vectors of documents given in pieces (late chunking), the document prefix decoded
        before the first piece but not counted in ``starts``; None for a document over ``token_context``."""
        import numpy as np

        from mdmem.providers.token_vectors import TokenVectors

        prefix = self.prepare_document("")
        out: list[TokenVectors | None] = []
        prepared = [[prefix, *(sanitize_text(p) for p in pieces)] for pieces in docs]
        for got in self._guarded(lambda: self.embed_token_batch(prepared)):
            if got is not None:
                if got.vectors.ndim != 2 or (self.dims is not None and got.vectors.shape[1] != self.dims):
                    raise ProviderError(f"{self.id} returned token vectors of shape {got.vectors.shape}")
                if not np.all(np.isfinite(got.vectors)):
                    raise ProviderError(f"{self.id} returned token vectors with NaN or infinite values")
                got = TokenVectors(got.vectors, got.starts[1:])
            out.append(got)
        return out

    # -- the shared pipeline ------------------------------------------------------------------------
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents: returns a float32 array of shape (len(texts), dims), rows L2-normalised."""
        return self._embed_all([self.prepare_document(sanitize_text(t)) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query: a float32 vector of length ``dims``, L2-normalised."""
        return self._embed_all([self.prepare_query(sanitize_text(text))])[0]

    def embed_query_within(self, text: str, until: float) -> np.ndarray:
        """``embed_query`` that returns, or raises ``ProviderError``, by ``until`` (a ``time.monotonic()`` value).

        A provider that enforces deadlines runs on this thread under ``until``. Any other one (a llama.cpp
        call cannot be interrupted) runs on a worker thread that the caller stops waiting for at ``until``; the
        call then finishes in the background, and until it does further queries fail at once instead of
        queueing behind it. Overrunning the budget this way is not a provider failure for the breaker.
        """
        if self.enforces_deadline:
            with deadline.until(until):
                return self.embed_query(text)
        if until - time.monotonic() < MIN_ATTEMPT_SECONDS:
            raise _OutOfTime(self.id, 0, 0.0, None)
        with _WORKERS_LOCK:
            if self._overrun is not None and not self._overrun.done():
                raise ProviderError(f"{self.id} is still busy with an earlier query that overran its time budget")

        def work() -> np.ndarray:
            with deadline.until(until):
                return self.embed_query(text)

        from concurrent.futures import wait

        future = self._run_query(work)
        if not wait([future], max(0.0, until - time.monotonic())).done:
            with _WORKERS_LOCK:
                self._overrun = future
            raise ProviderError(f"{self.id} did not embed the query within its time budget (query.embedTimeoutMs)")
        return future.result()

    def _run_query(self, work: Callable[[], np.ndarray]) -> Future[np.ndarray]:
        """Start ``work`` on another thread (the caller may stop waiting for it); a provider with a thread
        of its own (local) runs it there."""
        from concurrent.futures import Future

        future: Future[np.ndarray] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                    future.set_exception(exc)

        threading.Thread(target=run, name=f"mdmemory-{self.id}-query", daemon=True).start()
        return future

    def _embed_all(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        prepared = self.truncate_all(texts)
        out: list[np.ndarray] = []
        for batch in self._batches(prepared):
            out.append(self._call_with_retry(batch))
        return np.concatenate(out, axis=0)

    def _batches(self, texts: list[str]) -> list[list[str]]:
        batches: list[list[str]] = []
        current: list[str] = []
        current_tokens = 0
        for text in texts:
            tokens = self.count_tokens(text) if self.max_batch_tokens else 0
            too_many = len(current) >= self.max_batch_size
            too_long = self.max_batch_tokens is not None and current_tokens + tokens > self.max_batch_tokens
            if current and (too_many or too_long):
                batches.append(current)
                current, current_tokens = [], 0
            current.append(text)
            current_tokens += tokens
        if current:
            batches.append(current)
        return batches

    def _call_with_retry(self, batch: list[str]) -> np.ndarray:
        """One batch with retries, bounded by ``max_total_seconds`` and the deadline in force; breaker-guarded."""
        return self._guarded(lambda: self._validate(batch, self.embed_batch(batch)))

    def _guarded(self, work: Callable[[], _T]) -> _T:
        """``work`` (one request's worth) under the retry policy, the deadline in force and the breaker."""
        started = time.monotonic()
        end = started + self.retry.max_total_seconds
        outer = deadline.current()
        end = end if outer is None else min(end, outer)
        gate = self.breaker
        probe = gate.admit(lease=end - started) if gate is not None else False  # ProviderPaused when open
        try:
            with deadline.until(end):
                result = self._attempts(work, started, end)
        except ProviderError as exc:
            neutral = isinstance(exc, InputRejected) or (isinstance(exc, _OutOfTime) and exc.attempts == 0)
            if gate is not None and neutral:
                gate.released(probe)  # an input refused, or never tried: no news about the provider
            elif gate is not None:
                gate.failed(probe, str(exc))
            raise
        except BaseException:
            if gate is not None:
                gate.released(probe)
            raise
        if gate is not None:
            gate.succeeded(probe)
        return result

    def _attempts(self, work: Callable[[], _T], started: float, end: float) -> _T:
        attempts = 0
        last: TransientProviderError | None = None
        while True:
            if end - time.monotonic() < MIN_ATTEMPT_SECONDS:
                raise _OutOfTime(self.id, attempts, time.monotonic() - started, last)
            attempts += 1
            try:
                return work()
            except TransientProviderError as exc:
                last = exc
                wait = self.retry.delay(attempts, exc.retry_after)
                elapsed = time.monotonic() - started
                if attempts > self.retry.max_retries:
                    raise ProviderError(
                        f"{self.id} embeddings failed after {attempts} attempt(s) in {elapsed:.1f}s: {exc}"
                    ) from exc
                if time.monotonic() + wait + MIN_ATTEMPT_SECONDS > end:
                    raise _OutOfTime(self.id, attempts, elapsed, exc) from exc
                self.sleep(wait)

    def _validate(self, batch: list[str], vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
        import numpy as np

        try:
            arr = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ProviderError(f"{self.id} returned vectors that are not a numeric matrix: {exc}") from exc
        if arr.ndim != 2 or arr.shape[0] != len(batch):
            got = arr.shape[0] if arr.ndim >= 1 else 0
            raise ProviderError(f"{self.id} returned {got} vector(s) for {len(batch)} input(s)")
        if self.dims is None:
            self.dims = int(arr.shape[1])
        elif arr.shape[1] != self.dims:
            raise ProviderError(
                f"{self.id} model {self.model!r} returned {arr.shape[1]}-dim vectors, expected {self.dims}; "
                "check the model name and the 'dimensions' setting"
            )
        if not np.all(np.isfinite(arr)):
            raise ProviderError(f"{self.id} returned vectors with NaN or infinite values")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (arr / norms).astype(np.float32)


class _OutOfTime(ProviderError):
    """The time budget ended before the first attempt (no outcome) or left no room for another one."""

    def __init__(self, provider: str, attempts: int, elapsed: float, last: BaseException | None) -> None:
        self.attempts = attempts
        if attempts == 0:
            message = f"{provider} embeddings were not attempted: the time budget had run out"
        else:
            message = (
                f"{provider} embeddings failed after {attempts} attempt(s) in {elapsed:.1f}s, "
                f"no time left in the budget to retry: {last}"
            )
        super().__init__(message)
