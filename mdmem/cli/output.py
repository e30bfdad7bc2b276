"""Printing a command's output, the daemon's or this process's (mdmem.cli.entry, mdmem.cli.commands)."""

from __future__ import annotations

import os
import sys


def write(code: int, out: str, err: str) -> int:
    """Print a command's output (the daemon's or this process's) and return its exit code."""
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except BrokenPipeError:  # `mdmem ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    return code
