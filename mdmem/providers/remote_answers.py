"""What an OpenAI-compatible embeddings server answered, as the remote provider (mdmem.providers.remote) sees
it: the vectors of a 200, or the failure mapped to ``TransientProviderError`` (429, 408, 409, 5xx, timeouts,
connection errors, an unreadable 200) or ``ProviderError`` (other 4xx, the wrong number of vectors), with a
fix in the message. Text quoted from the server is scrubbed of the key and header values (``secrets``) first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from mdmem.providers.transport import parse_retry_after
from mdmem.util.errors import InputRejected, ProviderError, TransientProviderError
from mdmem.util.redaction.credentials import REDACTED, scrub

_MAX_QUOTED = 300


class Secrets(Protocol):
    value: Any  # the secret strings, longest first


class RemoteAnswers:
    """The answers of the server at ``base_url`` (as shown: no credentials) for ``model``."""

    def __init__(self, base_url: str, model: str, timeout: float, secrets: Secrets) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self.secrets = secrets

    def parse(self, content_type: str, body: bytes) -> Any:
        if "html" in content_type.lower() or body.lstrip()[:1] == b"<":
            raise ProviderError(
                f"{self.base_url} answered with an HTML page, not JSON: remote.baseUrl does not point at an "
                "OpenAI-compatible API (it usually ends in /v1)"
            )
        try:
            return json.loads(body)
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self.malformed(f"the body is not valid JSON ({type(exc).__name__})") from None

    def vectors(self, response: Any, expected: int) -> list[list[float]]:
        data = _field(response, "data")
        if not isinstance(data, list):
            raise self.malformed("no 'data' list")
        rows: list[tuple[int, list[float]]] = []
        for item in data:
            index, vector = _field(item, "index"), _field(item, "embedding")
            if not isinstance(index, int) or not isinstance(vector, list):
                raise self.malformed("an item without an integer 'index' and a float list 'embedding'")
            rows.append((index, vector))
        if len(rows) != expected:
            raise ProviderError(
                f"{self.base_url} returned {len(rows)} embedding(s) for {expected} input(s); if the server "
                "caps inputs per request, lower max_batch_size"
            )
        rows.sort(key=lambda row: row[0])
        if [index for index, _ in rows] != list(range(expected)):
            raise ProviderError(f"{self.base_url} returned embedding indexes that are not 0..{expected - 1}")
        return [vector for _, vector in rows]

    def malformed(self, what: str) -> TransientProviderError:
        return TransientProviderError(
            f"{self.base_url} returned a malformed embeddings response ({what}); if this persists, check "
            "remote.baseUrl points at an OpenAI-compatible API"
        )

    def map_api_error(self, exc: Any, openai: Any) -> ProviderError:
        if isinstance(exc, openai.APITimeoutError):
            return TransientProviderError(f"request to {self.base_url} timed out after {self.timeout:g}s")
        if isinstance(exc, openai.APIConnectionError):
            reason = self.redact(str(exc.__cause__ or exc))
            return TransientProviderError(
                f"cannot connect to {self.base_url} ({reason}); check remote.baseUrl and that it is up"
            )
        if isinstance(exc, openai.APIStatusError):
            return self.map_status(exc.status_code, exc.response.headers, self.server_message(exc.body))
        if isinstance(exc, openai.APIResponseValidationError):
            return self.malformed("it does not match the embeddings schema")
        return ProviderError(f"{self.base_url} request failed: {type(exc).__name__}: {self.redact(str(exc))}")

    def map_status(self, status: int, headers: Mapping[str, str], message: str) -> ProviderError:
        detail = f"HTTP {status} from {self.base_url}/embeddings" + (f": {message}" if message else "")
        lowered = message.lower()
        if status == 429:
            return TransientProviderError(f"{detail} (rate limited)", retry_after=parse_retry_after(headers))
        if status >= 500 or status in (408, 409):
            return TransientProviderError(detail, retry_after=parse_retry_after(headers))
        if status == 401:
            return ProviderError(f"{detail}. The API key was rejected: check remote.apiKey / OPENAI_API_KEY")
        if status == 403:
            return ProviderError(
                f"{detail}. The key may not use model {self.model!r}: check remote.apiKey / OPENAI_API_KEY "
                "and the project's model access"
            )
        if status == 404:
            return ProviderError(
                f"{detail}. Check the model name ({self.model!r}) and remote.baseUrl ({self.base_url}; "
                "OpenAI-compatible servers usually end in /v1)"
            )
        if status == 413 or "maximum" in lowered or "too long" in lowered or "too large" in lowered:
            return InputRejected(
                f"{detail}. The input or request is too large for this server: lower max_input_tokens, "
                "max_batch_tokens or max_batch_size"
            )
        return ProviderError(
            f"{detail}. The server rejected the request: check the model name ({self.model!r}) and remote.dimensions"
        )

    def server_message(self, body: Any) -> str:
        if isinstance(body, bytes):  # read by transport.error_guard: JSON, or text
            try:
                body = json.loads(body)
            except ValueError:
                body = body.decode("utf-8", errors="replace")
        message: object = None
        if isinstance(body, dict):
            error = body.get("error")
            message = error.get("message") if isinstance(error, dict) else error or body.get("message")
        elif isinstance(body, str):
            message = body
        text = " ".join(str(message or "").split())
        if len(text) > _MAX_QUOTED:
            text = text[:_MAX_QUOTED] + "..."
        return self.redact(text)

    def redact(self, text: str) -> str:
        for secret in self.secrets.value:
            text = text.replace(secret, REDACTED)
        return scrub(text)


def _field(obj: Any, name: str) -> Any:
    """Attribute or key ``name``: the SDK builds models leniently, so fields may be missing or dicts."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
