"""Regular expressions compiled on first use.

A command that never needs a pattern should not pay for it at start-up: the secret patterns of
``mdmem.util.redaction`` and the CJK character classes of ``mdmem.util.tokens`` take ~10 ms to compile, a tenth
of what ``mdmem get`` may cost in all. ``lazy(...)`` stands in for ``re.compile(...)`` in module constants.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)``, done the first time one of its methods is called."""

    __slots__ = ("_source", "_flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    @property
    def pattern(self) -> str:
        return self._source

    @property
    def flags(self) -> int:
        """The flags given (without those ``re`` adds, such as ``re.UNICODE``)."""
        return self._flags

    def search(self, text: str, *args: int) -> re.Match[str] | None:
        return self.compiled.search(text, *args)

    def match(self, text: str, *args: int) -> re.Match[str] | None:
        return self.compiled.match(text, *args)

    def fullmatch(self, text: str, *args: int) -> re.Match[str] | None:
        return self.compiled.fullmatch(text, *args)

    def findall(self, text: str, *args: int) -> list[Any]:
        return self.compiled.findall(text, *args)

    def finditer(self, text: str, *args: int) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text, *args)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        return self.compiled.sub(repl, text, count)

    def split(self, text: str, maxsplit: int = 0) -> list[str | Any]:
        return self.compiled.split(text, maxsplit)


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    return LazyPattern(pattern, flags)
