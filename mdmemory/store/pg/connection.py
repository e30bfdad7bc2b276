"""Connecting to PostgreSQL: the URL (``store.url`` or ``MDMEMORY_PG_URL``), never printed with its password."""

from __future__ import annotations

import re
from typing import Any

from mdmemory.errors import StoreError

URL_ENV = "MDMEMORY_PG_URL"
_PASSWORD = re.compile(r"(?P<head>://[^/?#@:]*:)[^/?#@]*(?P<at>@)")
_PASSWORD_PARAM = re.compile(r"(?i)(?P<head>[?&]password=)[^&#]*")


def shown_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: what messages and status may print."""
    return _PASSWORD_PARAM.sub(r"\g<head>***", _PASSWORD.sub(r"\g<head>***\g<at>", url))


def connect(url: str, **kwargs: Any) -> Any:
    """A psycopg connection (autocommit off), or a ``StoreError`` that names the server but not the password."""
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            'store.backend "postgres" needs psycopg: pip install "mdmemory[postgres]"', kind="config"
        ) from exc
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        detail = str(exc).replace(url, shown_url(url)).strip().splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreError(f"cannot connect to PostgreSQL at {shown_url(url)}: {detail}", kind="unavailable") from None
