"""Per-token embeddings of a text given in pieces: what late chunking pools window vectors from.

A document is a list of pieces (its lines, say). The provider builds the token sequence itself, piece by
piece (the model's leading special tokens, each piece's tokens, the trailing ones), so the token span of every
piece is exact by construction, whatever the tokenizer; for WordPiece models (BERT, MiniLM, bge, e5) the
sequence is the text's own tokenization. ``TokenVectors.starts`` says where each piece's tokens begin.

``LlamaTokenModel`` is the llama.cpp side: a second context of the same GGUF with pooling ``none``, which
returns one vector per token. A sequence longer than the context is never decoded (llama.cpp would abort
the process): ``embed`` returns None for it and the caller embeds that chunk's windows separately.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TokenVectors:
    """One vector per token of a document (not normalised), and where each piece's tokens start:
    piece ``i`` is tokens ``starts[i]:starts[i + 1]`` (``len(starts)`` is pieces + 1)."""

    vectors: np.ndarray
    starts: tuple[int, ...]


def token_sequence(
    pieces: Sequence[str], tokenize: Callable[[bytes, bool], list[int]]
) -> tuple[list[int], tuple[int, ...]]:
    """The token ids of ``pieces`` as one sequence with the model's special tokens around it, and where each
    piece's tokens start. ``tokenize(data, add_specials)`` is the model's tokenizer."""
    head, tail = special_tokens(tokenize)
    ids = list(head)
    starts = []
    for piece in pieces:
        starts.append(len(ids))
        if piece:
            ids.extend(tokenize(piece.encode("utf-8", errors="replace"), False))
    starts.append(len(ids))
    ids.extend(tail)
    return ids, tuple(starts)


def special_tokens(tokenize: Callable[[bytes, bool], list[int]]) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (BERT: [CLS] and [SEP])."""
    bare = tokenize(b"a", False)
    full = tokenize(b"a", True)
    for at in range(len(full) - len(bare) + 1):
        if full[at : at + len(bare)] == bare:
            return full[:at], full[at + len(bare) :]
    return full, []  # not seen in practice: count them all as leading


def _without_log(llama_cpp: ModuleType, **params: Any) -> Any:
    """``llama_cpp.Llama(**params)`` with llama.cpp's log off: asking for pooling ``none`` on a mean-pooled model
    logs a warning that llama-cpp-python 0.3.x prints to the user's terminal (its level map predates ggml's)."""
    silent = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(silent, ctypes.c_void_p(0))
    try:
        return llama_cpp.Llama(**params)
    finally:
        try:
            from llama_cpp import _logger  # llama-cpp-python's own callback, which it installs on import

            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        except ImportError:  # pragma: no cover - a llama-cpp-python without it: keep the log off
            pass


class LlamaTokenModel:
    """A llama.cpp context with pooling ``none`` over a GGUF model: per-token embeddings of one sequence.

    Not thread-safe: the local provider calls it on its runner thread, under its lock.
    """

    def __init__(self, llama_cpp: ModuleType, path: str, n_ctx: int, threads: int) -> None:
        self._llama_cpp = llama_cpp
        self.n_ctx = n_ctx
        self._llm: Any = _without_log(
            llama_cpp,
            model_path=str(path),
            embedding=True,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,  # one sequence in one micro-batch: longer ones are refused below, never decoded
            flash_attn=True,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self.dims = int(self._llm.n_embd())
        self.decodes = 0  # sequences decoded, and their tokens (for benchmarks)
        self.tokens = 0

    def tokenize(self, data: bytes, specials: bool) -> list[int]:
        return list(self._llm.tokenize(data, add_bos=specials, special=False))

    def embed(self, pieces: Sequence[str]) -> TokenVectors | None:
        """Per-token vectors of ``pieces`` decoded as one sequence; None when it is longer than the context."""
        ids, starts = token_sequence(pieces, self.tokenize)
        if len(ids) > self.n_ctx:
            return None
        llm, llama_cpp = self._llm, self._llama_cpp
        ctx, batch = llm._ctx, llm._batch  # llama-cpp-python 0.3.x: Llama.embed decodes the same way
        batch.reset()
        ctx.kv_cache_clear()
        try:
            batch.add_sequence(ids, 0, True)
            ctx.decode(batch)
            ptr = llama_cpp.llama_get_embeddings(ctx.ctx)
            vectors = np.ctypeslib.as_array(ptr, shape=(len(ids), self.dims)).astype(np.float32)
        finally:
            batch.reset()
            ctx.kv_cache_clear()
        self.decodes += 1
        self.tokens += len(ids)
        return TokenVectors(vectors, starts)

    def set_threads(self, threads: int) -> None:
        ctx: Any = getattr(self._llm, "_ctx", None)
        if hasattr(ctx, "set_n_threads"):
            ctx.set_n_threads(threads, threads)

    def close(self) -> None:
        self._llm.close()
