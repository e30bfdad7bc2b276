"""Real fault conditions for tests: a small tmpfs that fills up, a store folder nobody can write, the CLI as a
subprocess. Each helper skips the test honestly when this machine cannot produce the condition."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, write

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def note(tag: str, lines: int = 40) -> str:
    """A daily note whose lines hold ``tag`` plus a line number, so each file has its own searchable words."""
    body = "\n".join(f"{' '.join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(10))} {tag}x{i}" for i in range(lines))
    return f"# {tag}\n\n{body}\n"


def write_notes(workspace: Path, prefix: str, count: int, lines: int = 40) -> list[str]:
    tags = [f"{prefix}{i}" for i in range(count)]
    for i, tag in enumerate(tags):
        write(workspace / "memory" / f"2026-01-{prefix}-{i:02d}.md", note(tag, lines))
    return tags


def write_config(path: Path, workspace: Path, store: Path, **memory_search: Any) -> Path:
    ms = {"provider": "hash", "store": {"path": str(store)}, **memory_search}
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    return path


# What lets root ignore file permissions; dropped (capsh), root obeys a folder's mode bits like anyone.
_DAC_CAPS = "cap_dac_override,cap_dac_read_search,cap_fowner,cap_linux_immutable"


def unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` run so that file permissions apply to it: as is for a user, without root's capabilities
    to override them for root (skips the test when ``capsh`` is missing)."""
    if os.geteuid() != 0:
        return cmd
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("running as root without capsh: permissions cannot be made to apply")
    return [capsh, f"--drop={_DAC_CAPS}", "--", "-c", 'exec "$0" "$@"', *cmd]


def cli(config: Path, *args: str, timeout: float = 120, permissions: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m mdmem ARGS --config CONFIG`` in a subprocess; never a traceback, whatever the exit code.
    With ``permissions``, file permissions apply to it even as root (``unprivileged``)."""
    cmd = [sys.executable, "-m", "mdmem", *args, "--config", str(config)]
    done = subprocess.run(
        unprivileged(cmd) if permissions else cmd,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=timeout,
    )
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    return done


def cli_json(config: Path, *args: str, permissions: bool = False) -> tuple[int, dict[str, Any]]:
    done = cli(config, *args, "--json", permissions=permissions)
    return done.returncode, json.loads(done.stdout)


@contextlib.contextmanager
def small_tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mountpoint`` (needs root); skips the test when it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


def fill_disk(folder: Path, leave: int = 0) -> Path:
    """Fill the file system holding ``folder`` with one file, then give back about ``leave`` bytes."""
    filler = folder / "filler.bin"
    block = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def remount(mountpoint: Path, mode: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{mode}", str(mountpoint)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount {mountpoint} {mode}: {done.stderr.decode().strip()}")


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[str]:
    """Make ``folder`` and everything in it unwritable for this process; yields how it was done.

    Root ignores permissions, so as root the files are made immutable (``chattr +i``); skips the test when
    neither works here. Everything is restored afterwards.
    """
    paths = [folder, *folder.rglob("*")]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        how, undo = "chmod a-w", lambda: [p.chmod(m) for p, m in modes.items()]
    else:
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("running as root without chattr: cannot make a folder unwritable")
        done = subprocess.run([chattr, "-R", "+i", str(folder)], capture_output=True)
        if done.returncode != 0:
            subprocess.run([chattr, "-R", "-i", str(folder)], capture_output=True)
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
        how, undo = "chattr +i", lambda: subprocess.run([chattr, "-R", "-i", str(folder)], check=True)
    try:
        try:
            (folder / "probe").write_text("x")
        except OSError:
            pass
        else:
            pytest.skip(f"{how} did not make {folder} read-only here")
        yield how
    finally:
        undo()
