"""What the command line says about a mistyped command, choice or option: the closest known ones (difflib).

Pure: words in, message text out; ``mdmem.cli.Parser`` calls it where argparse refuses an argument.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

CUTOFF = 0.6  # difflib's default similarity: "serach" finds "search", "foo" finds nothing


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)``, `` (did you mean 'x' or 'y'?)`` or "" when nothing known is close to ``word``."""
    close = _close(word, known)
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)" if close else ""


def _close(word: str, known: Iterable[str]) -> list[str]:
    choices = [k for k in dict.fromkeys(known) if isinstance(k, str)]
    return difflib.get_close_matches(word, choices, n=2, cutoff=CUTOFF)


def invalid_choice(value: object, choices: Iterable[object]) -> str:
    """argparse's ``invalid choice`` message with the closest choices named first."""
    listed = [str(c) for c in choices]
    hint = did_you_mean(str(value), listed)
    return f"invalid choice: {value!r}{hint} (choose from {', '.join(repr(c) for c in listed)})"


def unrecognized(extras: Sequence[str], options: Iterable[str]) -> str:
    """argparse's ``unrecognized arguments`` message, with the closest known option for each mistyped one."""
    known = list(options)
    named = [arg.partition("=")[0] for arg in extras if arg.startswith("-")]
    hints = []
    for arg in extras:
        name = arg.partition("=")[0]
        close = _close(name, known) if name.startswith("-") else []
        if close:
            hints.append(" or ".join(repr(c) for c in close) + (f" for {name}" if len(named) > 1 else ""))
    text = f"unrecognized arguments: {' '.join(extras)}"
    return text + (f" (did you mean {'; '.join(hints)}?)" if hints else "")
