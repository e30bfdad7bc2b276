"""Late chunking with the remote provider against a real llama.cpp server (xllamacpp's, in its own process on
127.0.0.1, MiniLM): with ``--pooling none`` the window vectors are pooled from the server's token embeddings;
a pooling server keeps separate windows; a server that cannot be asked keeps the index as it is."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.index.embedding import embedding_windows, window_inputs
from mdmem.index.late import late_setup
from mdmem.memory import Memory
from mdmem.util.errors import EmbeddingsPending
from tests.conftest import MINILM, both_backends, write
from tests.test_late_chunking import TRIP, expected_window

pytestmark = pytest.mark.skipif(
    not MINILM.is_file() or importlib.util.find_spec("xllamacpp") is None, reason=f"needs xllamacpp and {MINILM}"
)

SERVER = """
import sys, time, xllamacpp as x
p = x.CommonParams()
p.model.path = sys.argv[1]
p.embedding = True
p.n_ctx = p.n_batch = p.n_ubatch = 512
p.n_parallel = 1
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 1
p.n_threads_http = 1
if sys.argv[2] == "none":
    p.pooling_type = x.llama_pooling_type.LLAMA_POOLING_TYPE_NONE
p.hostnames = ["127.0.0.1"]
p.port = int(sys.argv[3])
server = x.Server(p)
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServerProcess:
    """llama.cpp's HTTP server (xllamacpp) with MiniLM, as ``llama-server --embeddings [--pooling none]``."""

    def __init__(self, pooling: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(MINILM), pooling, str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == b"ready"
        end = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.root}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < end, "the llama.cpp server did not start"
            time.sleep(0.1)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def post(self, path: str, body: Any) -> Any:
        req = urllib.request.Request(
            self.root + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class DirectServer:
    """The server's own per-token embeddings of a text, asked directly over HTTP (not through mdmem)."""

    def __init__(self, server: LlamaServerProcess) -> None:
        self.server = server

    def ntokens(self, text: str) -> int:
        return len(self.server.post("/tokenize", {"content": text, "add_special": False})["tokens"])

    def tokens(self, text: str) -> np.ndarray:
        return np.asarray(self.server.post("/embedding", {"content": text})[0]["embedding"], dtype=np.float32)


@pytest.fixture(scope="module")
def pooling_none() -> Iterator[LlamaServerProcess]:
    server = LlamaServerProcess("none")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pooling_mean() -> Iterator[LlamaServerProcess]:
    server = LlamaServerProcess("mean")
    yield server
    server.stop()


def remote_settings(server: LlamaServerProcess, **chunking: Any) -> dict[str, Any]:
    return {
        "model": "all-MiniLM-L6-v2",
        "remote": {"baseUrl": f"{server.root}/v1", "maxRetries": 0, "timeoutSeconds": 10},
        "chunking": {"windowVectors": "late", **chunking},
        "cache": {"enabled": False},
    }


@both_backends
def test_remote_late_windows_are_the_mean_of_the_servers_token_embeddings(
    workspace: Path, make_memory: Callable[..., Memory], pooling_none: LlamaServerProcess
) -> None:
    write(workspace / "memory" / "2026-05-01.md", TRIP)
    # chunks of ~200 estimated tokens: the remote chunker estimates, and ~400 of them may pass MiniLM's 512
    mem = make_memory(remote_settings(pooling_none, tokens=200, overlap=40), provider="openai")
    report = mem.sync()
    assert report["embedded"] > 0 and not report.get("embedError")
    provider = mem.choice.provider
    assert provider is not None and provider.token_embeddings is True, provider.token_note()  # type: ignore[attr-defined]
    assert mem.store.get_meta("identity")["windowVectors"] == "late"
    setup = late_setup(provider, mem.settings.chunking)
    assert setup == (512, 0)  # the server's context, from /v1/models
    status = mem.status()
    assert status["windowVectors"]["inEffect"] == "late" and "token embeddings" in status["windowVectors"]["why"]
    direct = DirectServer(pooling_none)
    chunks = mem.store.chunks_of("memory/2026-05-01.md")
    assert len(chunks) >= 2
    checked = 0
    for chunk in chunks:
        windows, plan = window_inputs(chunk, 64, provider.count_tokens, setup)
        if not windows:  # a chunk that fits in one window: one vector, as with separate windows
            continue
        assert plan is not None  # every chunk fits the server's context: all late-chunked
        assert [w[1:] for w in windows] == embedding_windows(chunk, 64, provider.count_tokens)
        stored = mem.store.vectors_by_hash([key for key, *_ in windows])
        assert len(stored) == len(windows)
        for key, _, first, last in windows:
            assert float(stored[key] @ expected_window(direct, chunk, first, last)) >= 0.9999
            checked += 1
    assert checked >= 8
    # queries go to the same server: its token vectors mean-pooled here (it refuses /v1/embeddings)
    hits = mem.search("which bicycle did Melanie rent near the castle?", max_results=3, min_score=0.0)["results"]
    assert hits and hits[0]["path"] == "memory/2026-05-01.md"
    query = provider.embed_query("ferry fare")
    mean = direct.tokens("ferry fare").mean(axis=0)
    assert float(query @ (mean / np.linalg.norm(mean))) >= 0.9999


def test_a_pooling_server_keeps_separate_windows_and_says_why(
    workspace: Path, make_memory: Callable[..., Memory], pooling_mean: LlamaServerProcess
) -> None:
    write(workspace / "memory" / "2026-05-01.md", TRIP)
    mem = make_memory(remote_settings(pooling_mean), provider="openai")
    assert mem.sync()["embedded"] > 0
    provider = mem.choice.provider
    assert provider is not None and provider.token_embeddings is False
    assert "windowVectors" not in mem.store.get_meta("identity")  # the same vectors as "separate"
    status = mem.status()["windowVectors"]
    assert status["inEffect"] == "separate" and "--pooling none" in status["why"]
    chunk = mem.store.chunks_of("memory/2026-05-01.md")[0]
    windows, plan = window_inputs(chunk, 64, provider.count_tokens, late_setup(provider, mem.settings.chunking))
    assert plan is None
    stored = mem.store.vectors_by_hash([key for key, *_ in windows])
    alone = provider.embed_documents([text for _, text, _, _ in windows])
    assert min(float(stored[k] @ v) for (k, *_), v in zip(windows, alone, strict=True)) >= 0.9999


def test_a_server_that_cannot_be_asked_keeps_the_index_and_a_switch_rebuilds(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(
        workspace / "memory" / "2026-05-01.md", "# Day\n\n" + "\n".join(f"- heron {i} at reed bed" for i in range(30))
    )
    server = LlamaServerProcess("none")
    try:
        first = make_memory(remote_settings(server, windowTokens=16), provider="openai")
        assert first.sync()["embedded"] > 0
        assert first.store.get_meta("identity")["windowVectors"] == "late"
        first.close()
    finally:
        server.stop()
    down = make_memory(remote_settings(server, windowTokens=16), provider="openai")  # same URL, nobody there
    write(workspace / "memory" / "2026-05-02.md", "# Next\n\n- a new note while the server is down\n")
    with pytest.raises(EmbeddingsPending) as info:  # the provider's outage rules, as without late chunking
        down.sync()
    report = info.value.report
    assert report["rebuilt"] is False and report["indexed"] == 1  # keywords indexed; vectors wait for the server
    assert down.store.get_meta("identity")["windowVectors"] == "late"  # not known now: the index's stands
    assert down.status()["windowVectors"]["inEffect"] == "unknown"
    assert down.search("heron", max_results=3, min_score=0.0)["results"]
    down.close()
    separate = make_memory(remote_settings(server, windowTokens=16, windowVectors="separate"), provider="openai")
    with pytest.raises(EmbeddingsPending) as info:  # a real switch rebuilds, without asking the server
        separate.sync()
    assert info.value.report["rebuilt"] is True
    assert "windowVectors" not in separate.store.get_meta("identity")
