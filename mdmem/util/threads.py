"""Threads in mdmem's processes: the pools native libraries start, and mdmem's own shared pools.

numpy's BLAS (OpenBLAS) starts a thread per core for a matrix product as small as a search's (10k x 384):
in a process where several requests and llama.cpp's own threads already share the cores, those threads
only contend (measured: an in-memory KNN took 2.9 ms instead of 0.2 ms single-threaded). mdmem's own
numpy work is a few small products per search, so its processes ask for one BLAS thread unless the user
set the variable. It must happen before numpy is first imported; later it changes nothing.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded_blas() -> None:
    """One BLAS thread for this process, unless numpy is already loaded or the user chose a number."""
    if "numpy" in sys.modules:
        return
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool of up to ``workers`` threads named ``name``: created on first use and shared by
    every caller asking for that name (its threads start as work comes and stay for the process)."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(workers, thread_name_prefix=name)
        return pool
