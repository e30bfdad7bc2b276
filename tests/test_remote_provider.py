"""OpenAIEmbeddingProvider against a real HTTP server on 127.0.0.1 through the real openai SDK."""

from __future__ import annotations

import email.utils
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from mdmem.providers.remote import (
    LOCAL_PLACEHOLDER_KEY,
    OpenAIEmbeddingProvider,
    display_url,
    is_loopback,
)
from mdmem.providers.transport import parse_retry_after
from mdmem.util.errors import ProviderError, TransientProviderError
from tests.fake_openai import FakeOpenAIServer, Fault, fake_vector

KEY = "sk-test-SECRET-123"
HEADER_SECRET = "hdr-SECRET-456"
DIMS = 8


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK and httpx read os.environ too: no proxies or OpenAI settings leak into tests."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


MADE: list[OpenAIEmbeddingProvider] = []


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    before = set(threading.enumerate())
    with FakeOpenAIServer(dims=DIMS) as srv:
        yield srv
        while MADE:
            MADE.pop().close()  # stops each provider's I/O loop thread
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leaked == [], f"fake server left threads running: {leaked}"


def make(server: FakeOpenAIServer, **kwargs: object) -> tuple[OpenAIEmbeddingProvider, list[float]]:
    """Provider pointed at ``server`` with a sleep recorder instead of real sleeping."""
    options: dict[str, object] = {
        "base_url": server.url,
        "api_key": KEY,
        "dimensions": DIMS,
        "timeout": 5.0,
        "env": {},
    }
    options.update(kwargs)
    provider = OpenAIEmbeddingProvider(**options)  # type: ignore[arg-type]
    MADE.append(provider)
    sleeps: list[float] = []
    provider.sleep = sleeps.append  # type: ignore[method-assign]
    return provider, sleeps


def expected(texts: list[str], dims: int = DIMS) -> np.ndarray:
    arr = np.array([fake_vector(t, dims) for t in texts], dtype=np.float32)
    return arr / np.linalg.norm(arr, axis=1, keepdims=True)


def embedding_requests(server: FakeOpenAIServer) -> int:
    return len(server.inputs())


# -- success ------------------------------------------------------------------------------------------
def test_embeds_in_input_order_even_when_server_reverses_data(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server, model="text-embedding-3-small")
    server.enqueue(Fault.reversed_order())
    texts = ["alpha", "beta", "gamma"]

    out = provider.embed_documents(texts)

    np.testing.assert_allclose(out, expected(texts), rtol=1e-6)
    (req,) = server.requests
    assert req.path == "/v1/embeddings"
    assert req.body == {
        "model": "text-embedding-3-small",
        "input": texts,
        "dimensions": DIMS,
        "encoding_format": "float",
    }
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert sleeps == []


def test_dimensions_omitted_unless_set_and_dims_learned_from_first_response(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, model="my-local-model", dimensions=None)
    assert provider.dims is None

    query = provider.embed_query("hello")

    assert "dimensions" not in server.requests[0].body
    assert provider.dims == DIMS
    np.testing.assert_allclose(query, expected(["hello"])[0], rtol=1e-6)


def test_dimensions_param_shapes_vectors(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, model="text-embedding-3-large", dimensions=16)
    assert provider.dims == 16

    out = provider.embed_documents(["a", "b"])

    assert out.shape == (2, 16)
    assert server.requests[0].body["dimensions"] == 16


def test_known_model_defaults() -> None:
    small = OpenAIEmbeddingProvider(api_key=KEY, env={})
    large = OpenAIEmbeddingProvider(model="text-embedding-3-large", api_key=KEY, env={})
    other = OpenAIEmbeddingProvider(model="nomic-embed-text", api_key=KEY, env={}, max_input_tokens=2048)
    assert (small.dims, small.max_input_tokens, small.max_batch_size) == (1536, 8191, 2048)
    assert small.max_batch_tokens == 250_000
    assert (large.dims, large.max_input_tokens) == (3072, 8191)
    assert (other.dims, other.max_input_tokens) == (None, 2048)
    assert small.retry.max_retries == 5
    assert small.base_url == "https://api.openai.com/v1"


def test_batches_split_by_count(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, max_batch_size=2)
    texts = [f"text {i}" for i in range(5)]

    out = provider.embed_documents(texts)

    assert server.inputs() == [texts[0:2], texts[2:4], texts[4:5]]
    np.testing.assert_allclose(out, expected(texts), rtol=1e-6)


def test_batches_split_by_tokens(server: FakeOpenAIServer) -> None:
    provider, _ = make(server)
    texts = ["x" * 40, "y" * 40, "z" * 40, "w" * 40]
    per_text = provider.count_tokens(texts[0])
    provider.max_batch_tokens = 2 * per_text + 1

    provider.embed_documents(texts)

    assert server.inputs() == [texts[0:2], texts[2:4]]


def test_headers_are_sent(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, headers={"X-Trace": "abc", "X-Api-Key": HEADER_SECRET})

    provider.embed_query("q")

    headers = server.requests[0].headers
    assert headers["x-trace"] == "abc"
    assert headers["x-api-key"] == HEADER_SECRET


def test_overlong_input_is_truncated_not_rejected(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, max_input_tokens=10)
    long_text = "word " * 200

    provider.embed_documents([long_text, "short"])

    sent_long, sent_short = server.inputs()[0]
    assert sent_short == "short"
    assert long_text.startswith(sent_long) and 0 < len(sent_long) < len(long_text)
    assert provider.count_tokens(sent_long) <= 10


def test_token_estimate_is_conservative() -> None:
    provider = OpenAIEmbeddingProvider(model="nomic-embed-text", api_key=KEY, env={})
    assert provider.count_tokens("a" * 300) == 100  # 3 chars per token, not the estimate's 4


def test_sdk_retries_are_disabled(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, max_retries=0)
    server.enqueue(Fault.server_error())

    with pytest.raises(ProviderError):
        provider.embed_query("q")

    assert embedding_requests(server) == 1


def test_openai_is_imported_lazily() -> None:
    code = (
        "import sys\n"
        "from mdmem.providers.remote import OpenAIEmbeddingProvider\n"
        "p = OpenAIEmbeddingProvider(api_key='k', env={})\n"
        "p.identity(); p.provider_key; p.close()\n"
        "assert 'openai' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_close_is_idempotent_and_client_rebuilds(server: FakeOpenAIServer) -> None:
    provider, _ = make(server)
    provider.close()
    provider.embed_query("a")
    provider.close()
    provider.close()
    provider.embed_query("b")
    assert embedding_requests(server) == 2


# -- transient faults ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "wait"),
    [
        (Fault.rate_limit(retry_after="2"), 2.0),
        (Fault.rate_limit(retry_after=None, retry_after_ms="1500"), 1.5),
        (Fault.unavailable(retry_after="3"), 3.0),
    ],
    ids=["seconds", "ms", "503"],
)
def test_retry_after_is_honoured(server: FakeOpenAIServer, fault: Fault, wait: float) -> None:
    provider, sleeps = make(server)
    server.enqueue(fault)

    out = provider.embed_documents(["a", "b"])

    assert sleeps == [wait]
    assert server.inputs() == [["a", "b"], ["a", "b"]]
    np.testing.assert_allclose(out, expected(["a", "b"]), rtol=1e-6)


def test_retry_after_http_date_is_honoured(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.rate_limit(retry_after=email.utils.formatdate(time.time() + 5, usegmt=True)))

    provider.embed_query("a")

    assert len(sleeps) == 1 and 3.0 <= sleeps[0] <= 5.0


def test_500_is_retried_then_succeeds(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.server_error(), Fault.server_error())

    out = provider.embed_documents(["a"])

    assert len(sleeps) == 2
    assert embedding_requests(server) == 3
    np.testing.assert_allclose(out, expected(["a"]), rtol=1e-6)


def test_persistent_500_fails_after_max_retries(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server, max_retries=2)
    server.enqueue(*[Fault.server_error()] * 5)

    with pytest.raises(ProviderError) as info:
        provider.embed_query("a")

    assert not isinstance(info.value, TransientProviderError)
    assert "after 3 attempt(s)" in str(info.value) and "HTTP 500" in str(info.value)
    assert embedding_requests(server) == 3 and len(sleeps) == 2


def test_slow_response_times_out_and_is_retried(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server, timeout=0.3)
    server.enqueue(Fault.slow(3.0))
    started = time.monotonic()

    out = provider.embed_documents(["a"])

    assert time.monotonic() - started < 2.5
    assert len(sleeps) == 1 and embedding_requests(server) == 2
    np.testing.assert_allclose(out, expected(["a"]), rtol=1e-6)


def test_persistent_timeout_message(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, timeout=0.2, max_retries=1)
    server.enqueue(Fault.slow(3.0), Fault.slow(3.0))

    with pytest.raises(ProviderError, match=r"timed out after 0\.2s"):
        provider.embed_query("a")


def test_connection_refused_is_transient_then_fails_with_fix() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAIEmbeddingProvider(base_url=f"http://127.0.0.1:{port}/v1", env={}, max_retries=1)
    sleeps: list[float] = []
    provider.sleep = sleeps.append  # type: ignore[method-assign]

    with pytest.raises(ProviderError, match="cannot connect to .*check remote.baseUrl"):
        provider.embed_query("a")
    assert len(sleeps) == 1


@pytest.mark.parametrize("fault", [Fault.malformed(), Fault.missing_data()], ids=["bad-json", "no-data"])
def test_malformed_body_once_is_retried(server: FakeOpenAIServer, fault: Fault) -> None:
    provider, sleeps = make(server)
    server.enqueue(fault)

    out = provider.embed_documents(["a"])

    assert len(sleeps) == 1 and embedding_requests(server) == 2
    np.testing.assert_allclose(out, expected(["a"]), rtol=1e-6)


def test_persistent_malformed_body_fails_with_fix(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, max_retries=2)
    server.enqueue(*[Fault.malformed()] * 3)

    with pytest.raises(ProviderError, match="malformed.*remote.baseUrl"):
        provider.embed_query("a")
    assert embedding_requests(server) == 3


def test_html_page_fails_at_once(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.html())

    with pytest.raises(ProviderError, match="HTML page.*remote.baseUrl"):
        provider.embed_query("a")
    assert sleeps == [] and embedding_requests(server) == 1


# -- permanent faults ---------------------------------------------------------------------------------
def test_wrong_dimension_fails_naming_dims(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.wrong_dims(5))

    with pytest.raises(ProviderError, match=r"5-dim vectors, expected 8.*dimensions"):
        provider.embed_query("a")
    assert sleeps == []


@pytest.mark.parametrize(
    ("fault", "got"), [(Fault.fewer_vectors(1), 2), (Fault.extra_vectors(1), 4)], ids=["fewer", "more"]
)
def test_vector_count_mismatch_fails(server: FakeOpenAIServer, fault: Fault, got: int) -> None:
    provider, sleeps = make(server)
    server.enqueue(fault)

    with pytest.raises(ProviderError, match=rf"returned {got} embedding\(s\) for 3 input\(s\).*max_batch_size"):
        provider.embed_documents(["a", "b", "c"])
    assert sleeps == [] and embedding_requests(server) == 1


def test_401_fails_with_fix_and_no_retry(server: FakeOpenAIServer) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.unauthorized())

    with pytest.raises(ProviderError) as info:
        provider.embed_query("a")

    message = str(info.value)
    assert not isinstance(info.value, TransientProviderError)
    assert "HTTP 401" in message and "remote.apiKey / OPENAI_API_KEY" in message
    assert KEY not in message
    assert sleeps == [] and embedding_requests(server) == 1


@pytest.mark.parametrize(
    ("status", "server_message", "fix"),
    [
        (404, "The model `nope` does not exist", r"model name \('text-embedding-3-small'\).*remote.baseUrl"),
        (403, "You are not allowed to sample from this model", "remote.apiKey / OPENAI_API_KEY"),
        (400, "This model's maximum context length is 8192 tokens", "lower max_input_tokens"),
        (400, "Invalid value for 'dimensions'", "remote.dimensions"),
    ],
)
def test_client_errors_fail_with_fix(server: FakeOpenAIServer, status: int, server_message: str, fix: str) -> None:
    provider, sleeps = make(server)
    server.enqueue(Fault.status_error(status, server_message))

    with pytest.raises(ProviderError, match=fix) as info:
        provider.embed_query("a")
    assert server_message in str(info.value)
    assert sleeps == [] and embedding_requests(server) == 1


def test_wrong_path_gives_404_fix(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, base_url=server.url.removesuffix("/v1") + "/api")
    with pytest.raises(ProviderError, match="HTTP 404.*usually end in /v1"):
        provider.embed_query("a")


# -- secrets ------------------------------------------------------------------------------------------
REDACTION_CASES = {
    "401": [Fault.unauthorized()],
    "429": [Fault.rate_limit("0")] * 3,
    "500": [Fault.server_error()] * 3,
    "503": [Fault.unavailable("0")] * 3,
    "timeout": [Fault.slow(3.0)] * 3,
    "bad-json": [Fault.malformed()] * 3,
    "no-data": [Fault.missing_data()] * 3,
    "html": [Fault.html()],
    "dims": [Fault.wrong_dims(5)],
    "fewer": [Fault.fewer_vectors()],
    "404": [Fault.status_error(404, f"no such key {KEY} / {HEADER_SECRET}")],
    "400": [Fault.status_error(400, f"bad header Bearer {KEY}")],
}


def exception_texts(exc: BaseException | None) -> Iterator[str]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield str(exc)
        yield repr(exc)
        yield repr(exc.args)
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("faults", list(REDACTION_CASES.values()), ids=list(REDACTION_CASES))
def test_secrets_never_leak(server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture, faults: list[Fault]) -> None:
    caplog.set_level(logging.DEBUG)
    provider, _ = make(
        server,
        timeout=0.2,
        max_retries=2,
        headers={"X-Api-Key": HEADER_SECRET, "X-Trace": "visible"},
    )
    server.enqueue(*faults)

    with pytest.raises(ProviderError) as info:
        provider.embed_documents(["a", "b"])

    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was really used
    texts = [
        *exception_texts(info.value),
        repr(provider),
        str(provider),
        repr(vars(provider)),
        json.dumps(provider.identity()),
        provider.provider_key,
        caplog.text,
    ]
    for text in texts:
        assert KEY not in text
        assert HEADER_SECRET not in text


def test_repr_shows_model_and_clean_base_url() -> None:
    provider = OpenAIEmbeddingProvider(
        base_url="https://Proxy.Example.com:443/v1/?region=eu",
        api_key=KEY,
        headers={"Authorization": f"Bearer {KEY}"},
        env={},
    )
    assert repr(provider) == (
        "OpenAIEmbeddingProvider(model='text-embedding-3-small', base_url='https://proxy.example.com/v1?region=eu')"
    )


@pytest.mark.parametrize(
    "url", [f"https://bob:{KEY}@proxy.example.com/v1", f"https://proxy.example.com/v1?api_key={KEY}"]
)
def test_credentials_in_base_url_are_rejected_without_echoing_them(url: str) -> None:
    with pytest.raises(ProviderError, match="must not carry credentials.*remote.apiKey") as info:
        OpenAIEmbeddingProvider(base_url=url, api_key=KEY, env={})
    assert KEY not in str(info.value)
    assert "https://proxy.example.com/v1" in str(info.value)


# -- configuration ------------------------------------------------------------------------------------
def test_no_key_for_remote_url_names_config_and_env() -> None:
    with pytest.raises(ProviderError) as info:
        OpenAIEmbeddingProvider(base_url="https://api.example.com/v1", env={})
    assert "agents.defaults.memorySearch.remote.apiKey" in str(info.value)
    assert "OPENAI_API_KEY" in str(info.value)
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        OpenAIEmbeddingProvider(env={})


def test_loopback_server_needs_no_key(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, api_key=None)
    provider.embed_query("a")
    assert server.requests[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def test_env_supplies_key_and_base_url(server: FakeOpenAIServer) -> None:
    provider, _ = make(server, api_key=None, base_url=None, env={"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url})
    provider.embed_query("a")
    assert provider.base_url == server.url
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_provider_key_tracks_vector_settings_not_secrets() -> None:
    def key(**kwargs: object) -> str:
        options: dict[str, object] = {"api_key": KEY, "env": {}}
        options.update(kwargs)
        return OpenAIEmbeddingProvider(**options).provider_key  # type: ignore[arg-type]

    base = key()
    assert key(api_key="sk-other-key") == base
    assert key(base_url="https://API.openai.com/v1/") == base
    assert key(base_url="https://proxy.example.com/v1") != base
    assert key(dimensions=256) != base
    assert key(model="text-embedding-3-large") != base
    with_headers = key(headers={"X-Api-Key": "one", "X-Region": "eu"})
    assert with_headers != base
    assert key(headers={"X-Api-Key": "two", "X-Region": "eu"}) == with_headers
    assert key(headers={"X-Api-Key": "one", "X-Region": "us"}) != with_headers
    assert key(headers={"Cookie": "one", "X-Region": "eu"}) != with_headers


def test_invalid_settings_rejected() -> None:
    with pytest.raises(ProviderError, match="dimensions"):
        OpenAIEmbeddingProvider(api_key=KEY, env={}, dimensions=0)
    with pytest.raises(ProviderError, match="timeout"):
        OpenAIEmbeddingProvider(api_key=KEY, env={}, timeout=0)


# -- helpers ------------------------------------------------------------------------------------------
def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    assert parse_retry_after({"retry-after": email.utils.formatdate(now + 30, usegmt=True)}, now=now) == 30.0
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({}) is None


def test_url_helpers() -> None:
    assert display_url("HTTP://LocalHost:80/v1/") == "http://localhost/v1"
    assert display_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"
    assert is_loopback("http://localhost:11434/v1")
    assert is_loopback("http://127.0.0.2:8080")
    assert is_loopback("http://[::1]:8080/v1")
    assert not is_loopback("https://api.openai.com/v1")
    assert not is_loopback("http://localhost.evil.com/v1")


def test_fake_server_stops_and_joins() -> None:
    srv = FakeOpenAIServer().start()
    srv.enqueue(Fault.slow(30))
    provider, _ = make(srv, timeout=0.2, max_retries=0)
    with pytest.raises(ProviderError):
        provider.embed_query("a")
    started = time.monotonic()
    srv.stop()
    srv.stop()
    assert time.monotonic() - started < 2
