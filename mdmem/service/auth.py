"""Who may call the service: the bearer token, where it comes from, and the token-less loopback mode.

By default (``service.auth: "token"``) every request but ``/healthz`` and the descriptor carries
``Authorization: Bearer <token>``. The token is ``MEMORY_API_TOKEN``, else ``service.token``, else one the
service generates on its first start and keeps in ``{home}/state/service-token`` (mode 0600; a file other
users can read is refused). A token always, because a service on 127.0.0.1 is reachable by every program
and every user of the machine, and by web pages through DNS rebinding; the proxy (cllama) sends the token
its per-agent ``memory.json`` names, and ``mdmem backfill --url`` reads the generated file itself.

``service.auth: "loopback"`` asks for no token: the service then only listens on a loopback address, and
only answers requests whose ``Host`` names this machine and that do not come from a web page
(mdmem.service.edge). For a single-user machine whose clients cannot send a token.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mdmem.config.load import Config
from mdmem.util.errors import ConfigError

TOKEN_ENV = "MEMORY_API_TOKEN"
TOKEN_FILE = "service-token"
_TOKEN = re.compile(r"[\x21-\x7e]+")  # what an Authorization header carries as is: visible ASCII


@dataclass(frozen=True)
class Auth:
    """``token`` None: the loopback mode. ``origin`` says where the token came from (never the token)."""

    token: str | None = field(repr=False)
    origin: str

    def allows(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header value carries the token (compared in constant time)."""
        if self.token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())


def token_path(home: Path) -> Path:
    return home / "state" / TOKEN_FILE


def is_loopback(host: str) -> bool:
    """Whether a listening address is a loopback one (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve(config: Config, env: Mapping[str, str], host: str) -> Auth:
    """The service's ``Auth`` for listening on ``host``; generates the token file when it needs one.
    Raises ConfigError naming the setting and the fix (never the token)."""
    given, origin = _configured(config, env)
    if config.service.auth == "loopback":
        if given is not None:
            raise ConfigError(
                f'service.auth is "loopback" (no token), but {origin} sets one. Fix: unset {origin}, or remove '
                "service.auth to require the token"
            )
        if not is_loopback(host):
            raise ConfigError(
                f'refusing to listen on {host} with service.auth "loopback": anyone who can reach it could read '
                f"and erase memory. Fix: listen on 127.0.0.1, or remove service.auth to require a token"
            )
        return Auth(None, "none (loopback)")
    if given is not None:
        return Auth(given, origin)
    path = token_path(config.home)
    generated = _ensure_file(path)
    return Auth(read_token_file(path), f"{path} (generated now)" if generated else str(path))


def _configured(config: Config, env: Mapping[str, str]) -> tuple[str | None, str]:
    if env.get(TOKEN_ENV) is not None:
        value, origin = env[TOKEN_ENV], TOKEN_ENV
    elif config.service.token is not None:
        value, origin = config.service.token, "service.token"
    else:
        return None, ""
    value = value.strip()
    if not value:
        raise ConfigError(
            f"{origin} is set but blank: the service would require a token no client can send. Fix: set it to a "
            f"token (e.g. the output of `openssl rand -hex 32`), or unset it to use the one the service generates "
            f"in {token_path(config.home)}"
        )
    if not _TOKEN.fullmatch(value):
        raise ConfigError(
            f"{origin} holds spaces, control or non-ASCII characters, which an Authorization header cannot carry "
            "as they are. Fix: use letters, digits and -._~+/= only"
        )
    return value, origin


def _ensure_file(path: Path) -> bool:
    """Create ``path`` with a new token (0600, complete before anyone can see it); True when created here."""
    if path.exists() or path.is_symlink():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made it meanwhile: theirs is kept
        created = True
    except FileExistsError:
        created = False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return created


def read_token_file(path: Path) -> str:
    """The token in ``path``; ConfigError when other users could read or change it, or it is not a token."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        problem = f"cannot read the service token {path}: {exc.strerror}. Fix: delete it to make a new one"
        raise ConfigError(problem) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ConfigError(
                f"the service token {path} is not a private file of this user (mode {stat.filemode(st.st_mode)}): "
                f"others could read it. Fix: chmod 600 {path}, or delete it to make a new one"
            )
        value = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _TOKEN.fullmatch(value):
        raise ConfigError(f"the service token {path} holds no usable token. Fix: delete it to make a new one")
    return value


def stored_token(home: Path) -> str | None:
    """The generated token of the service whose home is ``home``, if there is a readable one (for clients)."""
    path = token_path(home)
    try:
        return read_token_file(path) if path.is_file() else None
    except ConfigError:
        return None
