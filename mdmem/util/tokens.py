"""Token estimates and the Unicode rules shared by the chunker, providers and keyword search.

The estimate is CJK-aware: about one token per CJK character (Han, Kana, Hangul, CJK punctuation) and
about four characters per token for everything else. A provider with an exact tokenizer replaces it
through the ``TokenCounter`` hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mdmem.util.lazyre import lazy

TokenCounter = Callable[[str], int]
"""Returns the number of tokens a text costs. ``estimate_tokens`` is the default."""

# Han (incl. extensions A/B and compatibility), Hiragana, Katakana, Hangul syllables/jamo, CJK symbols,
# full-width forms. These scripts are written without spaces between words.
_CJK_RANGES = (
    "\u2e80-\u2fdf"  # CJK radicals, Kangxi radicals
    "\u3000-\u303f"  # CJK symbols and punctuation
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3100-\u312f"  # Bopomofo
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK unified ideographs extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff00-\uffef"  # half-width and full-width forms
    "\U00020000-\U0002ebef"  # extensions B-F
)
CJK_CHAR = lazy(f"[{_CJK_RANGES}]")
CJK_RUN = lazy(f"[{_CJK_RANGES}]+")


def is_cjk(ch: str) -> bool:
    """True when ``ch`` is a character of a script written without spaces (CJK)."""
    return CJK_CHAR.match(ch) is not None


def estimate_tokens(text: str) -> int:
    """Estimate tokens: one per CJK character plus one per four other characters (rounded up)."""
    if not text:
        return 0
    cjk = len(CJK_CHAR.findall(text))
    other = len(text) - cjk
    return cjk + math.ceil(other / 4)


def truncate_to_tokens(text: str, max_tokens: int, count: TokenCounter = estimate_tokens) -> str:
    """Return the longest prefix of ``text`` whose token count is at most ``max_tokens``.

    Binary search over character offsets, so it works with any monotone counter (estimate or exact).
    """
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]
