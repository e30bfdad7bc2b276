"""The local provider's second binding: llama.cpp through ``xllamacpp`` (binary wheels, no compile).

``xllamacpp`` (xorbitsai) ships one prebuilt llama.cpp library per platform on PyPI, so ``pip install
'mdmem[local]'`` gives vectors in seconds where llama-cpp-python compiles for ~20 minutes. Measured
here (docs/providers.md): identical token lists and vectors within cosine 0.9997 of llama-cpp-python, at
1.37-1.46x the CPU time of llama-cpp-python's portable build on an AVX-512 CPU (its wheel is AVX2 only).
So llama-cpp-python is used whenever it is installed, and this binding when it is not
(``mdmem.providers.factory``).

xllamacpp exposes llama.cpp's server rather than its C API. ``XllamaModel`` wraps one in-process ``Server``
as the subset of ``llama_cpp.Llama`` the local provider calls (``tokenize``, ``embed``, ``n_embd``,
``close``), so truncation, shared decodes, prefixes and identity stay the local provider's:

- Embeddings go in-process (``Server.handle_embeddings``), always as token ids: as text the server parses
  "[SEP]" or "<s>" typed in a note as special tokens, which llama-cpp-python (``special=False``) does not.
- Tokenizing is only served over the HTTP listener every ``Server`` opens: here a Unix socket in a private
  folder (0700; never a TCP port, which would have no API key and answer every origin), removed on
  ``close`` and at exit. One request costs ~150-260 us, so counts are cached, and many texts are tokenized
  in one request (``token_lists``, ``token_counts``): ~16 us a text. Indexing one LoCoMo conversation (61
  chunks, 376 inputs) made 206 requests, 0.2 s of 8-12 s.
- An over-long input makes the server answer an error instead of aborting, but inputs are cut to the
  context before they get here anyway (the local provider counts and truncates first).
- The thread count is fixed when the server starts: ``set_threads`` restarts it (a model load).
- It never shares a process with llama-cpp-python: both export llama.cpp's symbols, and with libllama
  loaded first, xllamacpp's calls bind to it (seen: a server that never finished starting). The provider
  refuses the second binding (``mdmem.providers.local``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdmem.util.errors import ProviderError

if TYPE_CHECKING:  # http.client costs ~20 ms to import: a keyword-only command never needs it
    import http.client

NAME = "xllamacpp"
PARALLEL = 8  # server slots: up to this many short inputs share one decode (the provider packs <= n_ctx tokens)
CACHE_ENTRIES = 16384  # token counts kept per model (a text is a line, a window or a chunk)
MAX_REQUEST_TEXTS = 512  # texts counted per tokenize request
MAX_SOCKET_DIR = 90  # bytes of the socket folder's path (TMPDIR), leaving room for "/server.sock"
_RETRIES = 2  # the server closes an idle keep-alive connection after 5 s, and any after 100 requests


def available() -> bool:
    """True when ``xllamacpp`` can be found (not imported: that maps a 100 MB library)."""
    try:
        return importlib.util.find_spec(NAME) is not None
    except (ImportError, ValueError):
        return False


def loaded() -> bool:
    """True when this process has xllamacpp's library mapped."""
    from mdmem.providers.native import mapped_library

    return mapped_library("xllamacpp.") is not None


def import_xllamacpp() -> Any:
    try:
        import xllamacpp
    except ImportError as exc:
        raise ProviderError(
            f"xllamacpp cannot be imported ({exc}). Fix: pip install --force-reinstall xllamacpp"
        ) from exc
    return xllamacpp


def fingerprint() -> str:
    """Identifies the installed xllamacpp build (for the crash probe's cache): version, library size, mtime."""
    spec = importlib.util.find_spec(NAME)
    parts = [NAME]
    folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(folder)):
            if ".so" in name or name.endswith((".pyd", ".dylib", "_version.py")):
                st = os.stat(os.path.join(folder, name))
                parts.append(f"{name}:{st.st_size}:{int(st.st_mtime)}")
    return "|".join(parts)


def _unix_http(path: str) -> http.client.HTTPConnection:
    """A keep-alive HTTP connection to the Unix socket ``path``."""
    import http.client
    import socket

    class UnixHTTP(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(path)
            self.sock = sock

    return UnixHTTP("localhost", timeout=60)


def _cleanup(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


class XllamaModel:
    """One GGUF embedding model in an xllamacpp ``Server``; the part of ``llama_cpp.Llama`` the provider uses."""

    def __init__(self, path: str, n_ctx: int, threads: int, n_embd: int) -> None:
        self.path = path
        self.n_ctx = n_ctx
        self.threads = max(1, threads)
        self._n_embd = n_embd
        self._lock = threading.Lock()  # the server: starting, embedding, stopping
        self._http = threading.Lock()  # the tokenizer connection and the cache (need not wait for an embedding)
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._specials: list[tuple[int, list[int], list[int]] | None] = []  # _affixes, once known
        self._server: Any = None
        self._conn: http.client.HTTPConnection | None = None
        self._folder = tempfile.mkdtemp(prefix="mdmemory-xllama-")  # 0700: the socket is this user's only
        if len(os.fsencode(self._folder)) > MAX_SOCKET_DIR:  # a socket's path has ~108 bytes at most
            os.rmdir(self._folder)
            self._folder = tempfile.mkdtemp(prefix="mdmemory-xllama-", dir="/tmp")
        self._socket = os.path.join(self._folder, "server.sock")
        self._finalizer = weakref.finalize(self, _cleanup, self._folder)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- the server -----------------------------------------------------------------------------------
    def _start(self) -> None:
        xlc = import_xllamacpp()
        p = xlc.CommonParams()
        p.model.path = self.path
        p.embedding = True
        p.n_ctx = p.n_batch = p.n_ubatch = self.n_ctx  # one sequence in one micro-batch, as native.open_model
        p.n_parallel, p.kv_unified = PARALLEL, True
        p.cache_prompt = False
        p.embd_normalize = -1  # raw vectors: the provider base normalises
        p.flash_attn_type = xlc.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
        p.cpuparams.n_threads = p.cpuparams_batch.n_threads = self.threads
        p.n_threads_http = 1
        p.verbosity, p.warmup, p.hostnames = 0, False, [self._socket]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._socket)  # a restart: the server refuses to bind over the old socket
        try:
            self._server = xlc.Server(p)
        except RuntimeError as exc:
            raise ProviderError(
                f"xllamacpp cannot load {self.path} ({exc}): the file is damaged or not an embedding model "
                "this llama.cpp supports. Fix: download or convert it again"
            ) from exc

    def set_threads(self, threads: int) -> None:
        """Compute on ``threads`` threads from now on: the server is restarted (its count is fixed at start)."""
        threads = max(1, threads)
        with self._lock, self._http:
            if threads == self.threads or self._server is None:
                self.threads = threads
                return
            self.threads = threads
            self._drop_connection()
            self._server = None
            self._start()

    def close(self) -> None:
        """Stop the server and remove its socket folder. Safe to call twice."""
        with self._lock, self._http:
            self._drop_connection()
            self._server = None  # its destructor stops the HTTP thread and frees the model
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._server is None

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the llama_cpp.Llama subset ---------------------------------------------------------------------
    def n_embd(self) -> int:
        return self._n_embd

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` as llama-cpp-python gives them (``add_bos``: the model's special tokens)."""
        content = text.decode("utf-8", errors="replace")
        return list(self._post({"content": content, "add_special": add_bos, "parse_special": special})["tokens"])

    def embed(self, texts: Sequence[str], normalize: bool = False, truncate: bool = True) -> list[list[float]]:
        """Raw vectors of ``texts``, which the provider has cut to the context already (``truncate`` cuts the
        token ids too, so an input that is still too long never reaches the server)."""
        ids = self.token_lists(texts)
        if truncate:
            ids = [t[: self.n_ctx] for t in ids]
        with self._lock:
            if self._server is None:
                raise ProviderError(f"the xllamacpp model {os.path.basename(self.path)} is closed")
            reply = self._server.handle_embeddings({"input": ids})
        if not isinstance(reply, dict) or "error" in reply:
            error = reply.get("error") if isinstance(reply, dict) else reply
            message = error.get("message") if isinstance(error, dict) else error
            raise ProviderError(
                f"xllamacpp failed to embed with {os.path.basename(self.path)}: {message}. Fix: check that the "
                "file is an embedding model; llama-cpp-python (`make local-fast`) is used instead when installed"
            )
        rows = sorted(reply["data"], key=lambda d: d["index"])
        return [row["embedding"] for row in rows]

    # -- counting ---------------------------------------------------------------------------------------
    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, special tokens included (as ``len(tokenize(...))``), from the cache or from
        one tokenize request for many texts."""
        out: list[int | None] = []
        missing: dict[str, None] = {}
        with self._http:
            for text in texts:
                n = self._counts.get(text)
                if n is not None:
                    self._counts.move_to_end(text)
                else:
                    missing[text] = None
                out.append(n)
        if missing:
            todo = list(missing)
            found: dict[str, int] = {}
            for i in range(0, len(todo), MAX_REQUEST_TEXTS):
                part = todo[i : i + MAX_REQUEST_TEXTS]
                found.update(zip(part, self._count_uncached(part), strict=True))
            with self._http:
                for text, n in found.items():
                    self._counts[text] = n
                while len(self._counts) > CACHE_ENTRIES:
                    self._counts.popitem(last=False)
            out = [found[t] if n is None else n for t, n in zip(texts, out, strict=True)]
        return [int(n or 0) for n in out]

    def _count_uncached(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.token_lists(texts)]

    def token_lists(self, texts: Sequence[str]) -> list[list[int]]:
        """``tokenize`` of each text (special tokens added), in one request.

        The server tokenizes each string of a mixed list on its own and adds the special tokens to the first
        only, so the texts go between marker ids (the model's first special token, which text never yields
        with ``parse_special`` off), the reply is split at the markers, and each piece gets the special
        tokens a text gets alone (the ones before and after "a"). Texts one by one when the model has no
        special token, or when the split does not come out even."""
        affixes = self._affixes()
        if len(texts) == 1 or affixes is None:
            return [self.tokenize(_utf8(t).encode("utf-8")) for t in texts]
        marker, before, after = affixes
        content: list[str | int] = [""]
        for text in texts:
            content += [marker, _utf8(text)]
        tokens = self._post({"content": content, "add_special": True, "parse_special": False})["tokens"]
        pieces: list[list[int]] = []
        for tok in tokens[len(before) + len(after) :]:  # after the empty first string's special tokens
            if tok == marker:
                pieces.append([])
            elif pieces:
                pieces[-1].append(tok)
        if len(pieces) != len(texts):  # a text yielded the marker after all
            return [self.tokenize(_utf8(t).encode("utf-8")) for t in texts]
        return [before + piece + after for piece in pieces]

    def _affixes(self) -> tuple[int, list[int], list[int]] | None:
        """(marker id, special tokens before a text, special tokens after it), or None: no special tokens."""
        if not self._specials:
            empty = self.tokenize(b"")
            plain = self.tokenize(b"a", add_bos=False)
            full = self.tokenize(b"a")
            at = next((i for i in range(len(full)) if full[i : i + len(plain)] == plain), None)
            if not empty or not plain or at is None or len(full) - len(plain) != len(empty):
                self._specials.append(None)
            else:
                self._specials.append((empty[0], full[:at], full[at + len(plain) :]))
        return self._specials[0]

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        with self._http:
            for attempt in range(_RETRIES + 1):
                if self._server is None:
                    raise ProviderError(f"the xllamacpp model {os.path.basename(self.path)} is closed")
                if self._conn is None:
                    self._conn = _unix_http(self._socket)
                try:
                    self._conn.request("POST", "/tokenize", body=data, headers={"Content-Type": "application/json"})
                    response = self._conn.getresponse()
                    raw = response.read()
                except (OSError, _http_errors()) as exc:
                    self._drop_connection()
                    if attempt < _RETRIES:
                        continue
                    raise ProviderError(
                        f"xllamacpp's tokenizer for {os.path.basename(self.path)} does not answer on "
                        f"{self._socket} ({exc}). Fix: check that the temporary folder is writable and not "
                        "cleaned while mdmem runs (TMPDIR), then try again"
                    ) from exc
                if response.status != 200:
                    raise ProviderError(
                        f"xllamacpp's tokenizer refused a text for {os.path.basename(self.path)} "
                        f"(HTTP {response.status}: {raw[:200].decode('utf-8', errors='replace')})"
                    )
                return dict(json.loads(raw))
        raise AssertionError("unreachable")


def _http_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def _utf8(text: str) -> str:
    """``text`` as valid UTF-8 (lone surrogates replaced, as llama-cpp-python's callers encode it)."""
    return text.encode("utf-8", errors="replace").decode("utf-8")
