"""Local embeddings from a GGUF model through llama.cpp (``provider: "local"``).

Two bindings: llama-cpp-python (compiled; preferred when installed: faster here) and xllamacpp (binary
wheels; what the ``local`` extra installs), see ``choose_binding`` and ``mdmem.providers.xllama``.

The model is a file path or ``hf:owner/repo/file.gguf`` (``mdmem.providers.model_files``). The binding is
imported and the model loaded on first use.

llama.cpp aborts the whole process (a C-level abort, not an exception) when one sequence has more tokens
than ``n_ubatch`` or than the model's trained context. So every text is measured with the model's own
tokenizer, special tokens and prefix included, and cut to fit before it reaches ``embed``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from mdmem.providers import native, probe, xllama
from mdmem.providers.base import EmbeddingProvider
from mdmem.providers.model_files import (  # noqa: F401 - re-exported: the model file helpers' old home
    HF_PREFIX,
    is_model_available,
    parse_hf_uri,
    pull_model,
    read_gguf_header,
    resolve_model_path,
)
from mdmem.providers.runner import Runner
from mdmem.providers.token_vectors import LlamaTokenModel, TokenVectors
from mdmem.util.errors import ProviderError
from mdmem.util.tokens import truncate_to_tokens

INSTALL_HINT = native.INSTALL_HINT
LLAMA_CPP_PYTHON = "llama-cpp-python"
BINDINGS = (LLAMA_CPP_PYTHON, xllama.NAME)


def choose_binding() -> str:
    """The llama.cpp binding to use: llama-cpp-python when installed (the faster one here), else xllamacpp.

    Raises ``ProviderError`` with the install command when neither is installed."""
    if xllama.loaded():  # this process runs it already: the other binding cannot join it
        return xllama.NAME
    if native.available():
        return LLAMA_CPP_PYTHON
    if xllama.available():
        return xllama.NAME
    raise ProviderError(
        "the local provider needs a llama.cpp binding and neither xllamacpp nor llama-cpp-python is installed. "
        f"Fix: {INSTALL_HINT} (installs xllamacpp, a prebuilt wheel), or build llama-cpp-python for this CPU "
        "with `make local-fast` in a clone"
    )


def _check_alone(binding: str) -> None:
    """Refuse to load ``binding`` into a process that runs the other one (their llama.cpp symbols clash)."""
    other = LLAMA_CPP_PYTHON if binding == xllama.NAME and native.loaded() else None
    other = other or (xllama.NAME if binding == LLAMA_CPP_PYTHON and xllama.loaded() else None)
    if other:
        raise ProviderError(
            f"the local provider cannot use {binding}: this process has loaded {other} already, and the two "
            "llama.cpp libraries cannot share a process. Fix: use one binding per process (mdmem picks "
            "llama-cpp-python when it is installed, else xllamacpp)"
        )


MIN_CONTEXT = 16

# (pattern on the model's file name / URI / GGUF name, query prefix, document prefix)
_FAMILY_PREFIXES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"embedding-?gemma"), "task: search result | query: ", "title: none | text: "),
    (re.compile(r"nomic"), "search_query: ", "search_document: "),
    (re.compile(r"(?<![a-z0-9])e5(?![0-9a-z])"), "query: ", "passage: "),
    (
        re.compile(r"bge-(small|base|large)-en"),
        "Represent this sentence for searching relevant passages: ",
        "",
    ),
)


def family_prefixes(*names: str) -> tuple[str, str]:
    """Known (query, document) prefixes for a model family recognised in ``names``; ("", "") otherwise."""
    text = " ".join(names).lower().replace("_", "-")
    for pattern, query, document in _FAMILY_PREFIXES:
        if pattern.search(text):
            return query, document
    return "", ""


def decode_groups(sized: Sequence[tuple[str, int]], limit: int, shared_max: int) -> list[list[str]]:
    """Texts (with their token counts, in order) grouped for llama.cpp decodes: consecutive inputs of at most
    ``shared_max`` tokens share a decode while their tokens fit ``limit``; a longer input is decoded alone."""
    groups: list[list[str]] = []
    used = 0
    for text, n in sized:
        shared = n <= shared_max
        if groups and shared and used and used + n <= limit:
            groups[-1].append(text)
            used += n
        else:
            groups.append([text])
            used = n if shared else 0
    return groups


# -- the provider ---------------------------------------------------------------------------------------


class LocalEmbeddingProvider(EmbeddingProvider):
    """Embeddings from a local GGUF model (llama-cpp-python), one sequence per llama.cpp call."""

    id = "local"
    max_batch_size = 32
    SHARED_DECODE_TOKENS = 160  # inputs up to this many tokens share a llama.cpp decode (see _decode_groups)
    QUERY_THREADS = 1  # llama.cpp threads for one query (see _on_query_threads); batches use ``threads``

    def __init__(
        self,
        model_path: str,
        cache_dir: Path,
        threads: int | None = None,
        context_size: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        allow_download: bool = False,
        binding: str | None = None,
    ) -> None:
        if context_size is not None and context_size < MIN_CONTEXT:
            raise ProviderError(f"local context size {context_size} is too small: use at least {MIN_CONTEXT}")
        if binding is not None and binding not in BINDINGS:
            raise ProviderError(f"unknown llama.cpp binding {binding!r}: use {' or '.join(BINDINGS)}")
        self.binding = binding or choose_binding()
        # per-token embeddings (late chunking) through llama-cpp-python; xllamacpp's windows stay separate
        self.token_embeddings = self.binding == LLAMA_CPP_PYTHON
        self.model_path = str(model_path)
        self.cache_dir = Path(cache_dir)
        self.threads = threads or os.cpu_count() or 1
        self.context_size = context_size
        self.allow_download = allow_download
        is_hf = self.model_path.startswith(HF_PREFIX)
        self.file_name = parse_hf_uri(self.model_path)[1] if is_hf else Path(self.model_path).name
        self.model = self.model_path if is_hf else self.file_name
        names = [self.model_path]
        local = Path(self.model_path).expanduser()
        if not is_hf and local.is_file():
            try:
                header = read_gguf_header(local)
            except ProviderError:
                header = {}  # load() reports the bad file; construction stays cheap and lazy
            names += [str(header.get("general.name", "")), str(header.get("general.basename", ""))]
        default_query, default_document = family_prefixes(*names)
        self.query_prefix = default_query if query_prefix is None else query_prefix
        self.document_prefix = default_document if document_prefix is None else document_prefix
        self.dims = None
        self.max_input_tokens = context_size or 512  # replaced by the real limit in load()
        self._llm: Any = None
        self._tokens: LlamaTokenModel | None = None  # pooling "none" context, opened on first late-chunked input
        self._opened: tuple[Any, str] | None = None  # (llama_cpp module, model file) once loaded (llama-cpp-python)
        self.cpu_backend: str | None = None  # the llama.cpp CPU backend variant loaded (after load()); "xllamacpp"
        self._lock = threading.RLock()  # loading, embedding and closing
        self._vocab_lock = threading.Lock()  # tokenizing (read-only in llama.cpp: it need not wait for an embedding)
        self._runner = Runner(f"mdmemory-{self.id}")  # every llama.cpp computation runs on its thread

    # -- loading ------------------------------------------------------------------------------------
    def load(self) -> None:
        """Resolve and load the model now (idempotent); then ``dims`` and ``max_input_tokens`` are exact."""
        if self._llm is not None:  # loaded: no lock (it is held for a whole batch of embeddings)
            return
        with self._lock:
            if self._llm is not None:
                return
            path = resolve_model_path(self.model_path, self.cache_dir, self.allow_download)
            header = read_gguf_header(path)
            arch = header.get("general.architecture")
            n_ctx_train = header.get(f"{arch}.context_length")
            if not isinstance(n_ctx_train, int) or n_ctx_train <= 0:
                raise ProviderError(f"{path} has no {arch}.context_length: is it a complete GGUF model?")
            n = min(n_ctx_train, self.context_size) if self.context_size else n_ctx_train
            _check_alone(self.binding)
            if self.binding == xllama.NAME:
                self._llm = self._open_xllama(path, n, header.get(f"{arch}.embedding_length"))
                self.dims = int(self._llm.n_embd())
                self.max_input_tokens = n
                return
            # a crash here kills a child, not us; on the backend this process runs already, if it runs one
            variant = probe.ensure_runs(path, n, self.threads, loaded=native.loaded_variant())
            llama_cpp, self.cpu_backend = native.load_llama_cpp(variant)
            try:
                llm = native.open_model(llama_cpp, str(path), n, self.threads)
            except (ValueError, RuntimeError, OSError) as exc:
                raise ProviderError(
                    f"llama.cpp cannot load {path} ({exc}): the file is damaged or not an embedding model "
                    "this llama-cpp-python supports; download or convert it again"
                ) from exc
            self._llm = llm
            self._opened = (llama_cpp, str(path))
            self.dims = int(llm.n_embd())
            self.max_input_tokens = n

    def _open_xllama(self, path: Path, n: int, n_embd: object) -> xllama.XllamaModel:
        if not isinstance(n_embd, int) or n_embd <= 0:
            raise ProviderError(f"{path} has no embedding_length: is it a complete GGUF embedding model?")
        probe.ensure_runs_xllamacpp(path, n, self.threads)  # a crash here kills a child, not us
        self.cpu_backend = xllama.NAME
        return xllama.XllamaModel(str(path), n, self.threads, n_embd)

    def close(self) -> None:
        with self._lock:
            with self._vocab_lock:
                llm, self._llm = self._llm, None
            tokens, self._tokens = self._tokens, None
            for model in (llm, tokens):
                if model is not None:
                    model.close()
        self._runner.close()

    def warm_up(self) -> None:
        """Load the model now: a query's time budget does not count loading (see base.embed_query_within)."""
        if self._llm is None:  # read without the lock: a loaded model must not wait for a running batch
            self.load()

    def limit_threads(self, threads: int) -> None:
        """Batches on at most ``threads`` llama.cpp threads from now on (the loaded model too, between two
        computations: on the runner's thread)."""
        self.threads = max(1, min(self.threads, threads))
        if self._llm is not None:
            self._runner.call(self._apply_threads)

    def _apply_threads(self) -> None:
        if isinstance(self._llm, xllama.XllamaModel):
            self._llm.set_threads(self.threads)
            return
        ctx: Any = getattr(self._llm, "_ctx", None)  # llama-cpp-python's context wrapper (0.3.x)
        if hasattr(ctx, "set_n_threads"):
            ctx.set_n_threads(self.threads, self.threads)
        if self._tokens is not None:
            self._tokens.set_threads(self.threads)

    # -- hooks --------------------------------------------------------------------------------------
    def identity(self) -> dict[str, object]:
        return {
            "file": self.file_name,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "context_size": self.context_size,
        }

    def prepare_document(self, text: str) -> str:
        return self.document_prefix + text

    def prepare_query(self, text: str) -> str:
        return self.query_prefix + text

    def count_tokens(self, text: str) -> int:
        """Exact tokens llama.cpp feeds the model for ``text``, special tokens ([CLS], [SEP]...) included."""
        if isinstance(self._llm, xllama.XllamaModel):  # through its cache: a request costs ~200 us
            return self.count_tokens_batch([text])[0]
        return len(self._tokenize(text))

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """``count_tokens`` of each text; xllamacpp counts them in one request (or from its cache)."""
        while True:
            self.load()
            with self._vocab_lock:
                llm = self._llm
                if isinstance(llm, xllama.XllamaModel):
                    return llm.token_counts(texts)
            if llm is not None:  # else closed between load() and here: load again
                return [self.count_tokens(t) for t in texts]

    def truncate_all(self, texts: Sequence[str]) -> list[str]:
        """``truncate`` of each text, counted in one batch first: most texts fit as they are."""
        self.load()
        counts = self.count_tokens_batch(texts)
        return [t if n <= self.max_input_tokens else self.truncate(t) for t, n in zip(texts, counts, strict=True)]

    def truncate(self, text: str) -> str:
        """Longest prefix of ``text`` whose tokens, specials included, fit the loaded context."""
        self.load()
        limit = self.max_input_tokens
        if self.count_tokens(text) <= limit:
            return text
        # bound the search: grow a prefix until it no longer fits, then binary-search inside it
        end = min(len(text), limit * 4)
        while end < len(text) and self.count_tokens(text[:end]) <= limit:
            end = min(len(text), end * 2)
        return truncate_to_tokens(text[:end], limit, self.count_tokens)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.load()
        return self._runner.call(lambda: self._embed_here(texts))  # the lock is only ever taken there

    def token_context(self) -> int:
        self.load()
        return self.max_input_tokens

    def embed_token_batch(self, docs: Sequence[Sequence[str]]) -> list[TokenVectors | None]:
        self.load()
        return self._runner.call(lambda: self._tokens_here(docs))

    def _tokens_here(self, docs: Sequence[Sequence[str]]) -> list[TokenVectors | None]:
        with self._lock:
            if self._tokens is None:
                assert self._opened is not None
                llama_cpp, path = self._opened
                try:
                    self._tokens = LlamaTokenModel(llama_cpp, path, self.max_input_tokens, self.threads)
                except (ValueError, RuntimeError, OSError) as exc:
                    raise ProviderError(f"llama.cpp cannot give token embeddings of {self.file_name}: {exc}") from exc
            try:
                return [self._tokens.embed(pieces) for pieces in docs]
            except (RuntimeError, ValueError) as exc:
                raise ProviderError(f"llama.cpp failed to embed with {self.file_name}: {exc}") from exc

    def _embed_here(self, texts: Sequence[str]) -> np.ndarray:
        assert self.dims is not None
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        with self._lock:
            row = 0
            for group in self._decode_groups(texts):
                try:
                    vectors = self._llm.embed(group, normalize=False, truncate=True)
                except (RuntimeError, ValueError) as exc:
                    raise ProviderError(f"llama.cpp failed to embed with {self.file_name}: {exc}") from exc
                for vector in vectors:
                    v = np.asarray(vector, dtype=np.float32)
                    out[row] = v.mean(axis=0) if v.ndim == 2 else v  # pooling "none": mean
                    row += 1
        return out

    def _decode_groups(self, texts: Sequence[str]) -> list[list[str]]:
        """``texts`` (in order) as the groups llama.cpp decodes together: each truncated to the context
        first (an over-long sequence must never reach llama.cpp), then consecutive short inputs (at most
        ``SHARED_DECODE_TOKENS`` each: a chunk's ~64-token windows) packed into one decode while their tokens
        fit the context; a longer input is decoded alone (attention over one long batch costs more than
        it saves)."""
        sized: list[tuple[str, int]] = []
        for text, n in zip(texts, self.count_tokens_batch(texts), strict=True):
            if n > self.max_input_tokens:
                text = self.truncate(text)
                n = self.count_tokens(text)
            sized.append((text, n))
        return decode_groups(sized, self.max_input_tokens, self.SHARED_DECODE_TOKENS)

    def _run_query(self, work: Callable[[], np.ndarray]) -> Future[np.ndarray]:
        return self._runner.submit(lambda: self._on_query_threads(work))

    def _on_query_threads(self, work: Callable[[], np.ndarray]) -> np.ndarray:
        """Run a query's embedding with ``QUERY_THREADS`` llama.cpp threads (on the runner's thread, so no
        batch runs meanwhile), then give batches their ``threads`` back.

        A query is a few dozen tokens: split over two threads it gains little, and in a process that
        answers requests side by side (the service) the second thread's OpenMP spin-waits take the core the
        other requests need; on a busy machine a descheduled team member stalled a query for a second.
        Measured with 8 concurrent recalls on 2 cores (README, "Memory service"): p95 480-1825 ms on two
        threads, 119-160 ms on one."""
        if self.threads <= self.QUERY_THREADS or isinstance(self._llm, xllama.XllamaModel):
            return work()  # xllamacpp's thread count is fixed while its server runs
        ctx: Any = getattr(self._llm, "_ctx", None)  # llama-cpp-python's context wrapper (0.3.x)
        if not hasattr(ctx, "set_n_threads"):
            return work()
        ctx.set_n_threads(self.QUERY_THREADS, self.QUERY_THREADS)
        try:
            return work()
        finally:
            ctx.set_n_threads(self.threads, self.threads)

    def _tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8", errors="replace")
        while True:
            self.load()
            with self._vocab_lock:
                llm = self._llm
                if llm is not None:  # else closed between load() and here: load again
                    return list(llm.tokenize(data, add_bos=True, special=False))
