"""Remote embeddings from any OpenAI-compatible ``/embeddings`` endpoint (``provider: "openai"``).

Uses the official ``openai`` SDK, imported and built on first use so keyword-only search starts fast. The
SDK's own retries are off (``max_retries=0``): the base class owns retries, backoff and the time cap.
mdmem.providers.remote_answers reads what the server answered and maps each failure to
``TransientProviderError`` (429, 408, 409, 5xx, timeouts, connection errors, an unreadable 200) or
``ProviderError`` (other 4xx, wrong vector count), with a fix in the message.

Bounded (``transport``): a request ends by ``timeoutSeconds`` or the caller's deadline, whichever is first,
however the server behaves; a body over ``response_cap`` is refused unread, error bodies are read to 1 MiB.

Secrets: the API key and header values never appear in an exception, repr, log record or ``identity()``.
Errors are raised *after* the ``except`` block that caught the SDK error, so the SDK exception (whose
request object carries the ``Authorization`` header) is reachable through neither ``__cause__`` nor
``__context__``; text quoted from the server is scrubbed of the key and header values first.

Malformed responses: a 200 whose body is not JSON, or is JSON without a usable ``data`` list, is
*transient*. The usual cause is a proxy or load balancer hiccup that one retry fixes; if it persists the
base gives up after ``max_retries`` and the message says to check ``remote.baseUrl``. An HTML page is the
exception: the base URL points at a website, so it fails at once. A well-formed answer with the wrong
number of vectors is permanent: a server that caps inputs per request does so every time.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mdmem.providers import deadline
from mdmem.providers.base import EmbeddingProvider, RetryPolicy
from mdmem.providers.llama_server import LlamaServer, PoolingChanged, native_error, server_root
from mdmem.providers.remote_answers import RemoteAnswers
from mdmem.providers.transport import (
    ErrorResponse,
    LoopThread,
    ResponseTooLarge,
    error_guard,
    read_capped,
)
from mdmem.providers.urls import display_url, has_credentials, is_loopback
from mdmem.util.errors import ProviderError, TransientProviderError
from mdmem.util.redaction.credentials import REDACTED, is_secret_name
from mdmem.util.tokens import estimate_tokens

log = logging.getLogger(__name__)

DEFAULT_MODEL = "text-embedding-3-small"
OPENAI_BASE_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "not-needed"
"""Sent to loopback servers (llama.cpp server, Ollama) that need no key; the SDK insists on one."""
NO_KEY_MESSAGE = "No API key: set agents.defaults.memorySearch.remote.apiKey or OPENAI_API_KEY"

KNOWN_MODELS: dict[str, tuple[int, int]] = {
    "text-embedding-3-small": (1536, 8191),
    "text-embedding-3-large": (3072, 8191),
    "text-embedding-ada-002": (1536, 8191),
}
"""Model -> (default dimension, max input tokens)."""

DEFAULT_MAX_INPUT_TOKENS = 8191
DEFAULT_MAX_BATCH_SIZE = 2048  # the API's limit on inputs per request
DEFAULT_MAX_BATCH_TOKENS = 250_000  # the API caps a request at 300k tokens; keep a margin for estimates
RESPONSE_BASE_BYTES = 1024 * 1024  # response cap: this, plus BYTES_PER_VALUE per expected number
BYTES_PER_VALUE = 48  # a JSON float is ~10-25 characters; room for pretty-printed bodies
UNKNOWN_DIMS = 8192  # dimensions assumed for the cap before the first answer (sqlite-vec's maximum)
ESTIMATE_MARGIN = 4 / 3
"""Without tiktoken, assume ~3 characters per token instead of the estimate's 4, so truncated code, URLs
and other token-dense text still fits the server's limit."""


class _Secret:
    """Holds a secret; ``repr`` and ``str`` never show it, so ``vars(provider)`` is safe to log."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


class OpenAIEmbeddingProvider(EmbeddingProvider):
    """Embeddings from the OpenAI API or any server speaking its ``/v1/embeddings`` protocol.

    ``base_url`` defaults to ``OPENAI_BASE_URL`` from ``env`` (default ``os.environ``), then to the OpenAI
    API; ``api_key`` likewise to ``OPENAI_API_KEY``. Loopback servers need no key. ``dimensions`` asks
    text-embedding-3 models for shorter vectors. Limits default to OpenAI's and can be overridden for
    other servers (a llama.cpp server, for one, rejects inputs longer than its batch size).
    """

    id = "openai"
    enforces_deadline = True

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        dimensions: int | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        env: Mapping[str, str] | None = None,
        *,
        max_input_tokens: int | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS,
    ) -> None:
        env = os.environ if env is None else env
        if dimensions is not None and (not isinstance(dimensions, int) or dimensions <= 0):
            raise ProviderError(f"remote.dimensions must be a positive integer, got {dimensions!r}")
        if timeout <= 0 or max_retries < 0 or max_batch_size <= 0:
            raise ProviderError("remote.timeoutSeconds and max_batch_size must be > 0, max_retries >= 0")
        raw_url = (base_url or env.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).strip()
        if has_credentials(raw_url):
            # httpx logs request URLs and turns user:pass into Basic auth, replacing the bearer key.
            raise ProviderError(
                f"remote.baseUrl ({display_url(raw_url)}) must not carry credentials: put the key in "
                "remote.apiKey or remote.headers"
            )
        key = api_key or env.get("OPENAI_API_KEY") or (LOCAL_PLACEHOLDER_KEY if is_loopback(raw_url) else "")
        if not key:
            raise ProviderError(NO_KEY_MESSAGE)
        header_map = {str(k): str(v) for k, v in (headers or {}).items()}
        known = KNOWN_MODELS.get(model)

        self.model = model
        self.base_url = display_url(raw_url)
        self.dimensions = dimensions
        self.timeout = float(timeout)
        self.dims = dimensions or (known[0] if known else None)
        self.max_input_tokens = max_input_tokens or (known[1] if known else DEFAULT_MAX_INPUT_TOKENS)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.retry = RetryPolicy(max_retries=max_retries)

        self._raw_base_url = raw_url
        self._api_key = _Secret(key)
        self._headers = _Secret(header_map)
        values = [key, *header_map.values()]
        self._scrub = _Secret(sorted({s for s in values if len(s) >= 4}, key=len, reverse=True))
        self.answers = RemoteAnswers(self.base_url, self.model, self.timeout, self._scrub)
        self._client: Any = None
        self._openai: Any = None
        self._tokenizer: Any = None  # None: not tried yet; False: unavailable
        self._lock = threading.Lock()
        self._io = LoopThread("mdmemory-openai-io")
        self._llama: LlamaServer | None = None  # a llama.cpp server's own routes (late chunking)
        self._pool_tokens = False  # the server runs with --pooling none: vectors pooled here (mean)
        self.token_embeddings: bool | None = None  # asked of the server by token_context()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    # -- identity and limits ------------------------------------------------------------------------
    def identity(self) -> dict[str, object]:
        """Base URL (without credentials), requested dimensions, and non-secret headers."""
        ident: dict[str, object] = {"base_url": self.base_url, "dimensions": self.dimensions}
        headers: dict[str, str] = self._headers.value
        if headers:
            names = ",".join(sorted(name.lower() for name in headers))
            ident["headers"] = {
                "names": hashlib.sha256(names.encode()).hexdigest()[:16],
                "values": {k.lower(): v for k, v in sorted(headers.items()) if not is_secret_name(k)},
            }
        return ident

    def count_tokens(self, text: str) -> int:
        """Exact count with tiktoken for OpenAI models when installed, or from a llama.cpp server that gives
        token embeddings (late chunking spans and fits them exactly), else a deliberately high estimate."""
        return self.count_tokens_batch([text])[0] if self.token_embeddings else self._estimate(text)

    def _estimate(self, text: str) -> int:
        tokenizer = self._get_tokenizer()
        if tokenizer:
            return len(tokenizer.encode(text, disallowed_special=()))
        return math.ceil(estimate_tokens(text) * ESTIMATE_MARGIN)

    def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = False
            if self.model in KNOWN_MODELS:
                try:
                    import tiktoken

                    self._tokenizer = tiktoken.get_encoding("cl100k_base")
                except Exception:  # not installed, or offline and the BPE file is not cached
                    log.debug("tiktoken unavailable; using the conservative token estimate")
        return self._tokenizer

    # -- the client ---------------------------------------------------------------------------------
    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import openai
                except ImportError as exc:
                    raise ProviderError("The openai package is not installed: pip install 'mdmem[remote]'") from exc
                self._openai = openai
                self._client = openai.AsyncOpenAI(
                    api_key=self._api_key.value,
                    base_url=self._raw_base_url,
                    default_headers=dict(self._headers.value) or None,
                    timeout=self.timeout,
                    max_retries=0,  # the base's retry loop owns retries and the time cap
                    http_client=openai.DefaultAsyncHttpxClient(event_hooks={"response": [error_guard]}),
                )
            return self._client

    def warm_up(self) -> None:
        """Import the SDK and build the client (seconds on a slow machine; no query budget counts it)."""
        self._get_client()

    def close(self) -> None:
        """Close the HTTP client and stop its loop thread. Safe to call twice; the next call builds a new one."""
        with self._lock:
            client, self._client = self._client, None
            llama, self._llama = self._llama, None

        async def last() -> None:
            for close in (client.close if client is not None else None, llama.aclose if llama else None):
                if close is not None:
                    await close()

        self._io.close(last=last)

    def response_cap(self, inputs: int) -> int:
        """Most bytes accepted in an answer for ``inputs`` texts: ample for floats as JSON, never unbounded."""
        return RESPONSE_BASE_BYTES + inputs * (self.dims or UNKNOWN_DIMS) * BYTES_PER_VALUE

    # -- the one provider method --------------------------------------------------------------------
    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """One ``POST /embeddings`` for ``texts``; vectors returned in input order (sorted by ``index``)."""
        if self._pool_tokens:
            return self._pooled(texts)
        client = self._get_client()
        openai = self._openai
        params: dict[str, Any] = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        if self.dimensions is not None:
            params["dimensions"] = self.dimensions
        left = deadline.time_left()
        limit = self.timeout if left is None else max(0.0, min(self.timeout, left))
        pooled = False
        try:
            kind, body = self._io.run(self._post(client, params, self.response_cap(len(texts))), limit)
        except TimeoutError:
            why = "" if limit == self.timeout else " (the rest of this call's time budget)"
            error: ProviderError = TransientProviderError(
                f"request to {self.base_url} timed out after {limit:.3g}s{why}"
            )
        except ErrorResponse as exc:
            message = self.answers.server_message(exc.body)
            pooled = exc.status == 400 and "pooling type 'none'" in message.lower()  # llama.cpp, --pooling none
            error = self.answers.map_status(exc.status, exc.headers, message)
        except ResponseTooLarge as exc:
            error = ProviderError(
                f"{self.base_url} sent too large an embeddings response: {exc}; check remote.baseUrl points at an "
                "OpenAI-compatible API, or lower max_batch_size"
            )
        except openai.APIError as exc:
            error = self.answers.map_api_error(exc, self._openai)
        else:
            return self.answers.vectors(self.answers.parse(kind, body), len(texts))
        if pooled:
            log.info("%s runs with --pooling none: its token vectors are mean-pooled here", self.base_url)
            self._pool_tokens = True
            return self._pooled(texts)
        # Raised here, outside the except block, so the SDK exception is not chained (see module doc).
        log.debug("openai embeddings request failed: %s", error)
        raise error

    async def _post(self, client: Any, params: dict[str, Any], cap: int) -> tuple[str, bytes]:
        async with client.embeddings.with_streaming_response.create(**params) as response:
            return response.headers.get("content-type", ""), await read_capped(response, cap)

    # -- a llama.cpp server's token embeddings (late chunking) ----------------------------------------
    def _server(self) -> LlamaServer:
        with self._lock:
            if self._llama is None:
                self._llama = LlamaServer(server_root(self._raw_base_url), self._native_client, self._io, self.timeout)
            return self._llama

    def _native_client(self) -> Any:  # the SDK's HTTP client, with our headers and error hook
        self._get_client()
        headers = {"Authorization": f"Bearer {self._api_key.value}", **self._headers.value}
        return self._openai.DefaultAsyncHttpxClient(
            headers=headers, timeout=self.timeout, event_hooks={"response": [error_guard]}
        )

    def token_context(self) -> int:
        """The server's context when it gives token embeddings (``LlamaServer.detect``), else 0: separate."""
        server = self._server()
        self.token_embeddings = server.detect(self.max_input_tokens, lambda exc: str(self._native_error(exc)))
        return server.context if self.token_embeddings else 0

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        if self.token_embeddings and self._llama is not None:
            try:
                return self._llama.counts(texts)
            except Exception as exc:  # noqa: BLE001 - counting must not stop keyword indexing: estimate
                log.debug("token counts from %s failed: %s", self.base_url, self._native_error(exc))
        return [self._estimate(t) for t in texts]

    def token_note(self) -> str:
        """Whether windows are late-chunked with this server, and why (for status)."""
        return self._llama.note if self._llama is not None else "not asked yet"

    def embed_token_batch(self, docs: Sequence[Sequence[str]]) -> list[Any]:
        server = self._server()
        try:
            return [server.token_vectors(pieces) for pieces in docs]
        except PoolingChanged:
            self.token_embeddings = False
            raise
        except Exception as exc:  # noqa: BLE001 - mapped as embeddings failures are (transient or not)
            error = self._native_error(exc)
        raise error

    def _pooled(self, texts: Sequence[str]) -> list[Any]:
        """Vectors from a server with ``--pooling none``: each text's token vectors' mean (as mean pooling)."""
        try:
            return [m.mean(axis=0) for m in self._server().embed_texts(texts)]
        except Exception as exc:  # noqa: BLE001 - mapped as embeddings failures are
            error = self._native_error(exc)
        raise error

    def _native_error(self, exc: BaseException) -> ProviderError:
        """A failure of the server's own routes as the provider's error (secrets scrubbed)."""
        message = self.answers.server_message(exc.body) if isinstance(exc, ErrorResponse) else ""
        return native_error(
            exc, self.base_url, lambda e: self.answers.map_status(e.status, e.headers, message), self.answers.redact
        )
