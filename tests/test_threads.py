"""One BLAS thread in mdmem's long-running processes, unless the user chose otherwise (mdmem.util.threads)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import os, sys\n"
    "{before}\n"
    "from mdmem.util.threads import single_threaded_blas\n"
    "single_threaded_blas()\n"
    "print(os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))\n"
)


def run(before: str = "", **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before)], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_one_blas_thread_before_numpy_loads() -> None:
    assert run() == "1 1"


def test_a_users_choice_is_kept() -> None:
    assert run(OPENBLAS_NUM_THREADS="4") == "4 1"


def test_nothing_changes_once_numpy_is_loaded() -> None:
    assert run("import numpy") == "None None"  # too late to matter: the variables are left alone
