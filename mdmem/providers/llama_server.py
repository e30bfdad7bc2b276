"""A llama.cpp server's own endpoints, beside its OpenAI ones: per-token embeddings for late chunking.

llama.cpp's server (``llama-server``, and xllamacpp's) answers ``POST /embedding`` (not OpenAI's API) with
``[{"index": i, "embedding": [[...], ...]}, ...]``: for a server started with ``--pooling none`` one raw
(not normalised) vector per token of the input, for any other pooling one pooled vector, normalised.
``content`` may be token ids, which it decodes as given (no special tokens added). ``POST /tokenize`` gives
the ids of a text (``add_special`` adds [CLS]/[SEP] or BOS/EOS). With pooling ``none`` its OpenAI route
``/v1/embeddings`` refuses every request (HTTP 400, "Pooling type 'none' is not OAI compatible").

So ``LlamaServer`` asks once (``probe``) whether the server gives token vectors: a short text's ids sent
to ``/embedding`` come back as one vector per token, or as one pooled vector (or the route is missing:
another kind of server). The remote provider then builds each chunk's token sequence here, piece by piece
(``token_vectors.token_sequence``, as the local provider does), so every window's span is exact.

Requests go over the provider's event loop thread (``transport.LoopThread``) with its timeout, headers (an
HTTP client the provider makes) and a response cap; ``native_error`` maps failures as the provider's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mdmem.providers import deadline
from mdmem.providers.token_vectors import TokenVectors, special_tokens
from mdmem.providers.transport import ErrorResponse, LoopThread, ResponseTooLarge, read_capped
from mdmem.util.errors import ProviderError, TransientProviderError

log = logging.getLogger(__name__)

PROBE_TEXT = "late chunking probe"
PROBE_RETRY_SECONDS = 60.0  # a probe that could not tell (server down) is tried again after this
BYTES_PER_VALUE = 48  # a JSON float is ~10-25 characters
BASE_BYTES = 1024 * 1024
UNKNOWN_DIMS = 8192
COUNT_CACHE = 16384  # token counts kept (a text is a line, a window or a chunk)


def server_root(base_url: str) -> str:
    """The server's root (where ``/embedding`` and ``/tokenize`` are) from an OpenAI base URL (``.../v1``)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def too_long(error: ErrorResponse) -> bool:
    """True when llama.cpp refused a sequence for its length (over the slot's context or the batch)."""
    text = error.body.decode("utf-8", errors="replace").lower()
    return "exceed_context_size" in text or "too large to process" in text or "larger than the max context" in text


class LlamaServer:
    """``/tokenize`` and ``/embedding`` of one llama.cpp server. ``probe`` once, then ``token_vectors``."""

    def __init__(
        self,
        root: str,
        make_client: Callable[[], Any],
        io: LoopThread,
        timeout: float,
    ) -> None:
        self.root = root
        self._make_client = make_client  # an async HTTP client with the provider's headers (it keeps the secrets)
        self._io = io
        self.timeout = timeout
        self._client: Any = None
        self._affixes: tuple[list[int], list[int]] | None = None
        self._counts: dict[str, int] = {}  # text -> tokens, oldest first
        self.dims: int | None = None
        self.context = 0
        self.supported: bool | None = None  # gives token vectors: None until a probe could tell
        self.note = "not asked yet"  # why, for status
        self._retry_at = 0.0  # an inconclusive probe is not repeated before this (time.monotonic())

    def __repr__(self) -> str:
        return f"LlamaServer({self.root!r})"

    # -- http ---------------------------------------------------------------------------------------
    async def _request(self, method: str, path: str, body: Any, cap: int) -> Any:
        if self._client is None:
            self._client = self._make_client()
        async with self._client.stream(method, self.root + path, json=body) as response:
            raw = await read_capped(response, cap)
        try:
            return json.loads(raw)
        except ValueError:
            raise TransientProviderError(f"{self.root}{path} answered with a body that is not JSON") from None

    def call(self, method: str, path: str, body: Any = None, cap: int = BASE_BYTES) -> Any:
        """One request, bounded by the timeout and the caller's deadline; ``TimeoutError``/``ErrorResponse``
        and the transport's errors propagate for the provider to map."""
        left = deadline.time_left()
        limit = self.timeout if left is None else max(0.0, min(self.timeout, left))
        return self._io.run(self._request(method, path, body, cap), limit)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- tokens -------------------------------------------------------------------------------------
    def tokenize(self, data: bytes, specials: bool) -> list[int]:
        """The server's token ids of ``data`` (a text's UTF-8), with the model's special tokens or without."""
        text = data.decode("utf-8", errors="replace")
        got = self.call("POST", "/tokenize", {"content": text, "add_special": specials, "parse_special": False})
        tokens = got.get("tokens") if isinstance(got, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ProviderError(f"{self.root}/tokenize answered without a list of token ids")
        return tokens

    def sequence(self, pieces: Sequence[str]) -> tuple[list[int], tuple[int, ...]]:
        """``pieces`` as one token sequence with the model's special tokens, and where each piece starts.

        The pieces are tokenized in one request, between marker ids (the model's first special token, which
        text never yields with ``parse_special`` off); one request a piece when the model has no special
        token or the split does not come out even."""
        head, tail = self._specials()
        lists = self._piece_lists(pieces)
        ids = list(head)
        starts = []
        for piece_ids in lists:
            starts.append(len(ids))
            ids.extend(piece_ids)
        starts.append(len(ids))
        ids.extend(tail)
        return ids, tuple(starts)

    def counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text with the model's special tokens (as the server embeds it), in one request;
        kept for the next asks (the lines of a chunk are counted again by packs)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._counts))
        if missing:
            head, tail = self._specials()
            for text, ids in zip(missing, self._piece_lists(missing), strict=True):
                self._counts[text] = len(head) + len(ids) + len(tail)
            while len(self._counts) > COUNT_CACHE:
                self._counts.pop(next(iter(self._counts)))
        return [self._counts[t] for t in texts]

    def _specials(self) -> tuple[list[int], list[int]]:
        if self._affixes is None:
            self._affixes = special_tokens(self.tokenize)
        return self._affixes

    def _piece_lists(self, pieces: Sequence[str]) -> list[list[int]]:
        head, _ = self._specials()
        lists: list[list[int]] | None = None
        if head and len(pieces) > 1:
            marker = head[0]
            content: list[Any] = []
            for piece in pieces:
                content += [marker, piece.encode("utf-8", errors="replace").decode("utf-8")]
            got = self.call("POST", "/tokenize", {"content": content, "add_special": False, "parse_special": False})
            tokens = got.get("tokens") if isinstance(got, dict) else None
            split: list[list[int]] = []
            for tok in tokens if isinstance(tokens, list) else []:
                if tok == marker:
                    split.append([])
                elif split:
                    split[-1].append(tok)
            lists = split if len(split) == len(pieces) else None
        if lists is None:
            lists = [self.tokenize(p.encode("utf-8", errors="replace"), False) if p else [] for p in pieces]
        return lists

    def embed_ids(self, ids: list[int]) -> np.ndarray | None:
        """The server's vectors for one token sequence: (tokens, dims) with pooling ``none``, (1, dims) from a
        pooling server; None when the server refuses the sequence for its length."""
        cap = BASE_BYTES + len(ids) * (self.dims or UNKNOWN_DIMS) * BYTES_PER_VALUE
        try:
            got = self.call("POST", "/embedding", {"content": [ids]}, cap)
        except ErrorResponse as exc:
            if exc.status in (400, 500) and too_long(exc):
                return None
            raise
        rows = _embeddings(got, 1, self.root)
        return rows[0]

    def embed_texts(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's vectors from ``/embedding`` (the server adds the special tokens)."""
        cap = BASE_BYTES + sum(len(t) + 2 for t in texts) * (self.dims or UNKNOWN_DIMS) * BYTES_PER_VALUE
        return _embeddings(self.call("POST", "/embedding", {"content": list(texts)}, cap), len(texts), self.root)

    # -- the probe ----------------------------------------------------------------------------------
    def probe(self, fallback_context: int) -> bool:
        """True when the server gives one vector per token (``--pooling none``), False when it pools or has
        no ``/embedding`` route. Sets ``context`` (the slot's context, from ``/v1/models`` when it says).

        Raises ``ErrorResponse`` (5xx, 429...), ``TimeoutError`` or a transport error when it cannot tell."""
        try:
            ids, _ = self.sequence([PROBE_TEXT])
            vectors = self.embed_ids(ids)
        except ErrorResponse as exc:
            if exc.status in (404, 405, 501) or (400 <= exc.status < 500 and exc.status not in (408, 409, 429)):
                return False  # not a llama.cpp server, or one without embeddings
            raise
        except ProviderError:  # answers, but not in llama.cpp's shapes
            return False
        if vectors is None or len(ids) < 2 or vectors.shape[0] != len(ids):
            return False
        self.dims = int(vectors.shape[1])
        self.context = fallback_context
        try:
            models = self.call("GET", "/v1/models")
            meta = models["data"][0].get("meta") or {}
            n_ctx = meta.get("n_ctx") or meta.get("n_ctx_train")
            if isinstance(n_ctx, int) and n_ctx > 0:
                self.context = min(n_ctx, fallback_context)
        except (ErrorResponse, ProviderError, KeyError, IndexError, TypeError, AttributeError):
            pass  # a refused sequence comes back as None: that chunk keeps separate windows
        return True

    def detect(self, fallback_context: int, describe: Callable[[BaseException], str]) -> bool | None:
        """``probe`` once (again after ``PROBE_RETRY_SECONDS`` when it could not tell), logging the outcome;
        ``describe`` turns a failure into a message without secrets. Returns ``supported``."""
        if self.supported is not None or time.monotonic() < self._retry_at:
            return self.supported
        try:
            found = self.probe(fallback_context)
        except Exception as exc:  # noqa: BLE001 - any failure only means "cannot tell yet"
            self._retry_at = time.monotonic() + PROBE_RETRY_SECONDS
            self.note = f"cannot tell yet ({describe(exc)}): windows separate until the server answers"
            log.info("%s: late chunking: %s", self.root, self.note)
            return None
        self.supported = found
        if found:
            self.note = f"the server gives token embeddings (context {self.context}): windows late-chunked"
            log.info("%s: late chunking: %s", self.root, self.note)
        else:
            self.note = (
                "the server gives no token embeddings: windows separate. Fix: start llama.cpp's server with "
                "--embeddings --pooling none to late-chunk"
            )
            log.info("%s: late chunking: %s", self.root, self.note)
        return found

    def token_vectors(self, pieces: Sequence[str]) -> TokenVectors | None:
        """Per-token vectors of ``pieces`` decoded as one sequence; None when it is longer than the context.
        Raises ``ProviderError`` when the server pools after all (it was restarted without ``--pooling none``)."""
        ids, starts = self.sequence(pieces)
        if len(ids) > self.context:
            return None
        vectors = self.embed_ids(ids)
        if vectors is None:
            return None
        if vectors.shape[0] != len(ids):
            self.supported = False
            self.note = "the server stopped giving token embeddings: windows separate"
            raise PoolingChanged(
                f"{self.root} returned {vectors.shape[0]} vector(s) for {len(ids)} tokens: it no longer gives "
                "token embeddings (restarted without --pooling none?)"
            )
        return TokenVectors(vectors, starts)


class PoolingChanged(ProviderError):
    """A server that gave token embeddings pools them now."""


def _embeddings(got: Any, expected: int, root: str) -> list[np.ndarray]:
    """The ``embedding`` matrices of a ``/embedding`` answer, in input order."""
    items = got if isinstance(got, list) else [got] if isinstance(got, dict) else None
    if items is None or len(items) != expected:
        raise ProviderError(f"{root}/embedding returned {len(items or [])} result(s) for {expected} input(s)")
    out: list[tuple[int, np.ndarray]] = []
    for n, item in enumerate(items):
        matrix = item.get("embedding") if isinstance(item, dict) else None
        index = item.get("index", n) if isinstance(item, dict) else n
        if isinstance(matrix, list) and matrix and not isinstance(matrix[0], list):
            matrix = [matrix]  # an older server's pooled answer: one flat vector
        try:
            arr = np.asarray(matrix, dtype=np.float32)
        except (TypeError, ValueError):
            arr = np.zeros((0,), dtype=np.float32)
        if arr.ndim != 2 or not arr.size or not isinstance(index, int):
            raise ProviderError(f"{root}/embedding answered without a list of vectors per input")
        out.append((index, arr))
    out.sort(key=lambda pair: pair[0])
    return [arr for _, arr in out]


def native_error(
    exc: BaseException,
    base_url: str,
    map_status: Callable[[ErrorResponse], ProviderError],
    redact: Callable[[str], str],
) -> ProviderError:
    """A failure of the server's own routes as the remote provider maps its embeddings failures: an HTTP
    status by ``map_status``, timeouts and connection errors transient; text scrubbed by ``redact``."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, ErrorResponse):
        return map_status(exc)
    if isinstance(exc, TimeoutError):
        return TransientProviderError(f"request to {base_url} timed out")
    if isinstance(exc, ResponseTooLarge):
        return ProviderError(f"{base_url} sent too large a token embeddings response: {exc}")
    if isinstance(exc, OSError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        reason = redact(str(exc) or type(exc).__name__)
        return TransientProviderError(
            f"cannot connect to {base_url} ({reason}); check remote.baseUrl and that it is up"
        )
    return ProviderError(f"{base_url} request failed: {type(exc).__name__}: {redact(str(exc))}")
