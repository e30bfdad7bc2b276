"""The remote provider's base URL: shown without credentials or secret query values, refused when it carries
them, and recognised when it points at this machine (a local OpenAI-compatible server needs no key)."""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from mdmem.util.redaction.credentials import is_secret_name


def display_url(url: str) -> str:
    """``url`` normalised and safe to show: no credentials or secret query values, no trailing slash."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default_port = {"http": 80, "https": 443}.get(parts.scheme.lower())
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port in (None, default_port) else f"{host}:{port}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not is_secret_name(k)])
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), query, ""))


def has_credentials(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.username or parts.password) or any(
        is_secret_name(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True)
    )


def is_loopback(url: str) -> bool:
    """True when ``url`` points at this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    host = (urlsplit(url.strip()).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
