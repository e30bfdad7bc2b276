"""Reading the JSON5 config file without paying the pure-Python JSON5 parser on every command.

The json5 package parses in Python: 2.5 ms for a 150-byte file and ~85 ms for ``config.example.json5``
(11 KB, mostly comments), once per command. So:

- text that is plain JSON is read by the standard library's ``json`` (microseconds), duplicate keys
  refused as json5 refuses them (such text goes on to json5, which reports them in its own words);
- other text (comments, trailing commas, unquoted keys...) is parsed by json5 and the result kept as plain
  JSON in ``cache_dir``, one file per config path holding the SHA-256 of the text it came from, so the
  next command with the same text reads that instead. The file is owner-only (0600, in a 0700 folder):
  a config may hold an API key, and its copy must not be readable by more users than the config. A
  cache file that is missing, unreadable or for other text is ignored (and replaced); one that cannot be
  written is skipped.

Whatever json5 would reject is parsed by json5, so errors are json5's own (``ValueError``); so is text
with an escaped surrogate (``\\ud83d``), which json5 reads differently from json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

FORMAT = 1
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Duplicate(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Duplicate("duplicate key")
    return found


def loads(text: str, source: str | os.PathLike[str], cache_dir: Path | None) -> Any:
    """The value of the JSON5 ``text`` read from ``source``; ValueError (json5's) when it is not JSON5."""
    if _SURROGATE_ESCAPE.search(text):  # json5 keeps an escaped pair as two lone surrogates; json joins them
        return _json5(text)
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except ValueError:
        pass
    import hashlib

    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    cache = None
    if cache_dir is not None:
        name = hashlib.sha256(os.fsencode(os.path.abspath(source))).hexdigest()[:20]
        cache = cache_dir / f"{name}.json"
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads(cache.read_text(encoding="utf-8"))
            if isinstance(kept, dict) and kept.get("format") == FORMAT and kept.get("sha256") == digest:
                return kept["value"]
    value = _json5(text)
    if cache is not None:
        with contextlib.suppress(OSError, ValueError):
            cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            # owner-only, as a config holding an API key should be: the copy must not widen who can read it
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(json.dumps({"format": FORMAT, "sha256": digest, "value": value}))
            os.replace(tmp, cache)
    return value


def _json5(text: str) -> Any:
    import json5  # here: plain JSON and cached text never need it

    return json5.loads(text, allow_duplicate_keys=False)
