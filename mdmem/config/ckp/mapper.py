"""The state of one import (mdmem.config.ckp.to_config): the config being built, the report, and the rule that
resolves a declaration's paths (templates, relative paths)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mdmem.config.ckp.fields import MS, TEMPLATE, Field
from mdmem.util.errors import ConfigError


@dataclass
class Mapper:
    agent: str
    variables: Mapping[str, str]
    base: str
    source: str | None
    ms: dict[str, Any] = field(default_factory=dict)
    entry: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    fields: list[Field] = field(default_factory=list)
    workspace: str | None = None

    def add(
        self, path: str, status: Any, value: Any = None, key: str | None = None, set: Any = None, note: str = ""
    ) -> None:
        self.fields.append(Field(path, status, value, key, set, note))

    def put(self, rel: str, value: Any) -> str:
        """Set ``memorySearch.<rel>`` in the config; the full key, for the report."""
        node = self.ms
        *parents, last = rel.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        return f"{MS}.{rel}"

    def path(self, text: str, where: str, store_template: bool = False) -> str:
        """``text`` with its templates resolved and made absolute against the declaration's folder (``~``
        stays for mdmem to expand). In ``store.path``, ``{identity_name}`` becomes mdmem's ``{agentId}``."""

        def value(m: Any) -> str:
            name = m.group(1)
            if name in self.variables:
                return self.variables[name]
            if name == "identity_name":
                return "{agentId}" if store_template else self.agent
            known = ", ".join(f"{{{n}}}" for n in ("identity_name", *self.variables))
            raise ConfigError(
                f"{where}: the path template {{{name}}} has no value here (known: {known}); the spec asks a "
                f"runtime to resolve every template before it touches the file system. Fix: give its value "
                f"(`mdmem ckp import --var {name or 'NAME'}=VALUE`) or write the path without it.",
                key=where,
                source=self.source,
            )

        resolved = TEMPLATE.sub(value, text)
        if not resolved.strip():
            raise ConfigError(
                f"{where}: an empty path. Fix: give the folder's path or remove path.", key=where, source=self.source
            )
        if resolved != "~" and not resolved.startswith(("~/", "/")):
            resolved = os.path.join(self.base, resolved)
        return resolved.rstrip("/") if len(resolved) > 1 else resolved
