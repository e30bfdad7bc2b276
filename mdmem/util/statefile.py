"""Small JSON state files beside an index, kept writable when the disk is full.

A state file is replaced atomically (temporary file + rename). Each is padded to ``RESERVE_BYTES``, so
when the disk is full and no new file can be made, the existing one is overwritten in place: its
blocks are already allocated, and the record of the failure is exactly what must not be lost then.
Readers tolerate the padding (JSON ignores trailing whitespace) and treat a torn file as absent.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any

RESERVE_BYTES = 4096
_FULL = (errno.ENOSPC, errno.EDQUOT)


def write_state_file(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path``; on a full disk overwrite the existing file in place.

    Raises ``OSError`` when neither works (a read-only folder, or a full disk and no file yet).
    """
    body = json.dumps(data, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
    if len(body) < RESERVE_BYTES:
        body = body.ljust(RESERVE_BYTES, b" ")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if exc.errno not in _FULL or not path.exists():
            raise
        with open(path, "r+b") as fh:
            old = fh.seek(0, os.SEEK_END)
            fh.seek(0)
            fh.write(body.ljust(old, b" ") if len(body) < old else body)


def read_state_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when it is missing, unreadable or torn."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
