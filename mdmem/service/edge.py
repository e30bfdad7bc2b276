"""What every request must be before a route sees it: not from a web page, for this machine when no token is
asked for, JSON when it has a body (the body itself is read by mdmem.service.bodies).

The service has no browser clients (the proxy, ``mdmem backfill``, curl). A web page can still send
requests to ``127.0.0.1``: a form or ``fetch`` POST with ``text/plain`` goes out without a preflight, and a
page on a DNS name that an attacker points at ``127.0.0.1`` (DNS rebinding) can even read the answers, since
to the browser it is the page's own origin. So, whatever the auth mode:

- a request with an ``Origin`` header, or a ``Sec-Fetch-Site`` other than ``none`` (a user typing the URL),
  is refused with 403: browsers send one of them with every request a page makes, no other client does;
- a ``POST`` needs ``Content-Type: application/json`` (415 otherwise): the only type a page cannot send
  cross-origin without a preflight the service never answers;

and with ``service.auth: "loopback"`` (no token) the ``Host`` header must name this machine (``localhost``,
``127.0.0.0/8``, ``::1``, with or without a port): a rebinding page sends its own DNS name (403).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mdmem.util.redaction import redact

_PORT = re.compile(r":\d{1,5}")
BROWSER = (
    "requests from web pages are refused (the memory service has no browser clients, and a page could otherwise "
    "write, read or erase memory). Fix: call it from a program such as the proxy or curl"
)


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    """The JSON error answer; ``message`` redacted (it may quote a field's value or a path, which may hold a
    token: a 400 for ``metadata.timezone`` quotes what was sent, a 503 where a symlink points)."""
    return JSONResponse({"error": redact(message)}, status_code=status)


def host_is_loopback(host: str) -> bool:
    """Whether a ``Host`` header names this machine: ``localhost``, an address in ``127.0.0.0/8`` or ``::1``
    (also as ``::ffff:127.x.y.z``), with or without ``:port``. Other spellings (``127.1``, a trailing dot, a
    DNS name) are refused: browsers normalise the addresses they send, only a DNS name can rebind."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, port = host[1:].partition("]")
        if not bracket or (port and not _PORT.fullmatch(port)):
            return False
    else:
        name, colon, port = host.partition(":")
        if colon and not _PORT.fullmatch(":" + port):
            return False
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if host.startswith("[") != (address.version == 6):
        return False  # an IPv6 address is written in brackets, an IPv4 one never is
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def refusal(method: str, headers: Iterable[tuple[str, str]], loopback_only: bool) -> tuple[int, str] | None:
    """``(status, message)`` for a request the service must not serve, else None. ``headers`` are
    ``(lower-case name, value)`` pairs as received (a header may repeat)."""
    seen: dict[str, list[str]] = {}
    for name, value in headers:
        seen.setdefault(name, []).append(value)
    if "origin" in seen:
        return 403, f"Origin header: {BROWSER}"
    site = seen.get("sec-fetch-site", [])
    if any(v.strip().lower() != "none" for v in site):
        return 403, f"Sec-Fetch-Site header: {BROWSER}"
    if loopback_only:
        hosts = seen.get("host", [])
        if len(hosts) != 1:
            problem = "missing" if not hosts else "sent more than once"
            return 400, f"Host header: {problem}; without a token the service answers only requests for localhost"
        if not host_is_loopback(hosts[0]):
            return 403, (
                f"Host header: {hosts[0][:80]!r} is not this machine (localhost, 127.0.0.1, [::1]); without a token "
                "only local programs may call the service, and a web page reaching 127.0.0.1 through a DNS name is "
                'refused. Fix: call http://127.0.0.1:<port>, or require a token (service.auth: "token")'
            )
    if method == "POST":
        types = seen.get("content-type", [])
        media = types[0].split(";", 1)[0].strip().lower() if len(types) == 1 else None
        if media != "application/json":
            got = "none" if not types else repr(", ".join(types)[:80])
            return 415, (
                f"Content-Type header: expected application/json, got {got}. "
                "Fix: send the JSON body with Content-Type: application/json"
            )
    return None


class EdgeRules:
    """ASGI middleware applying ``refusal`` to every request, on every route (404s and 405s too)."""

    def __init__(self, app: ASGIApp, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = ((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
            refused = refusal(scope["method"], headers, self.loopback_only)
            if refused is not None:
                await error(*refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
