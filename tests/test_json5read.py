"""mdmem.config.json5read: the same values and errors as json5, without its parser on every command."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import json5
import pytest

from mdmem.config import json5read

TEXTS = [
    '{"agents": {"defaults": {"workspace": "~/clawd"}}}',  # plain JSON: the standard library reads it
    '{"a": [1, 2.5, -0.0, 1e400, true, null, "\\u00e9\\ud83d\\ude00"], "b": {}}',
    '{"a": NaN, "b": Infinity, "c": -Infinity}',
    '{"lone": "\\ud800"}',
    "// a comment\n{ agents: { defaults: { workspace: '~/ws', }, }, }",  # JSON5: parsed once, then cached
    "{ hex: 0x1F, plus: +1, dot: .5, trailing: 1., multi: 'a\\\nb' /* block */ }",
    "{ a: 1, a: 2 }",  # duplicate keys: json5's error
    '{"a": 1, "a": 2}',  # the same in plain JSON: still json5's error, not the standard library's last-wins
    "{ a: 1",  # truncated
    "[1, 2,,]",
    "-0",
    '[1E5, 1e-400, "a\\/b", "tab\\there"]',
    '"just a string"',
    "{ s: 'caf\\u00e9 \\ud83d\\ude00' }",
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b and str(a) == str(b)


def _outcome(read: Any) -> tuple[str, Any]:
    try:
        return "value", read()
    except ValueError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("text", TEXTS)
def test_the_value_or_error_is_json5s_first_and_from_the_cache(text: str, tmp_path: Path) -> None:
    source, cache = tmp_path / "config.json5", tmp_path / "cache"
    expected = _outcome(lambda: json5.loads(text, allow_duplicate_keys=False))
    for _ in range(2):  # the second time from the cache when json5 parsed it
        got = _outcome(lambda: json5read.loads(text, source, cache))
        assert got[0] == expected[0] and _same(got[1], expected[1]), (got, expected)


def test_json5_text_is_parsed_once_per_content(tmp_path: Path) -> None:
    source, cache = tmp_path / "config.json5", tmp_path / "cache"
    text = "// mine\n{ agents: {} }"
    assert json5read.loads(text, source, cache) == {"agents": {}}
    [kept] = cache.iterdir()
    data = json.loads(kept.read_text())
    data["value"] = {"from": "the cache"}  # what the next read returns proves where it came from
    kept.write_text(json.dumps(data))
    assert json5read.loads(text, source, cache) == {"from": "the cache"}
    assert json5read.loads(text + " ", source, cache) == {"agents": {}}  # other text: parsed again
    assert [p.name for p in cache.iterdir()] == [kept.name]  # one file per config path
    kept.write_text("{not json")
    assert json5read.loads(text, source, cache) == {"agents": {}}  # a damaged cache is ignored and replaced
    assert json5read.loads(text, source, None) == {"agents": {}}  # no cache at all
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o500)
    assert json5read.loads(text, source, read_only / "cache") == {"agents": {}}  # cannot write it: fine


def test_the_cached_copy_of_a_config_is_owner_only(tmp_path: Path) -> None:
    """A config may hold an API key: its parsed copy is readable by its owner only, whatever the umask."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        cache = tmp_path / "home" / "cache" / "config"
        text = '// keys\n{ memorySearch: { remote: { apiKey: "sk-test-0123456789abcdef" } } }'
        json5read.loads(text, tmp_path / "config.json5", cache)
    finally:
        os.umask(old)
    [kept] = cache.iterdir()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
