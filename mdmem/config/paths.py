"""Where the configuration is: the home folder, the config file, and how a configured path is made absolute.

Shared by mdmem.config.load and the command line's daemon client (mdmem.runtime.ipc_protocol), which must find the
same
file without importing the config module; standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def absolute(text: str, base: str, env: Mapping[str, str]) -> str:
    """``text`` with ``~`` expanded (``env["HOME"]`` first), made absolute against ``base``, normalised."""
    if (text == "~" or text.startswith(("~/", "~\\"))) and env.get("HOME"):
        text = env["HOME"] + text[1:]
    return os.path.abspath(os.path.join(base, os.path.expanduser(text)))


def home_dir(env: Mapping[str, str]) -> str:
    """``$MDMEMORY_HOME`` or ``~/.mdmemory``, absolute."""
    return absolute(env.get("MDMEMORY_HOME") or "~/.mdmemory", os.getcwd(), env)


def config_file(path: str | os.PathLike[str] | None, env: Mapping[str, str], home: str) -> tuple[str | None, str]:
    """The config file a command reads and where its name came from: ``path`` (``--config``), else
    ``$MDMEMORY_CONFIG``, else ``<home>/config.json5`` when it exists (else None: built-in defaults).
    An explicit path is returned whether or not it exists; mdmem.config.load says when it does not."""
    explicit, origin = (path, "path argument") if path else (env.get("MDMEMORY_CONFIG"), "MDMEMORY_CONFIG")
    if not explicit:
        default = os.path.join(home, "config.json5")
        return (default if os.path.isfile(default) else None), "default"
    return absolute(os.fspath(explicit), os.getcwd(), env), origin
