"""Import llama-cpp-python with a CPU backend that runs on this CPU.

A portable llama-cpp-python build (``GGML_BACKEND_DL=ON GGML_CPU_ALL_VARIANTS=ON``, what ``make test``
builds) ships one CPU backend per instruction-set level (``libggml-cpu-haswell.so``,
``libggml-cpu-skylakex.so``, ...) beside ``libllama.so``. llama.cpp would look for them next to the Python
executable and in the current directory, never in the package, so this module loads them from the package's
``lib`` folder before any model is created: either the best variant for this CPU (llama.cpp scores each by
CPUID) or one variant by name, which the crash probe (``mdmem.providers.probe``) uses to step down
when the best-scored variant dies with SIGILL on a CPU that advertises features it cannot run (AMX in some
VMs). A build with the CPU backend linked in (a plain ``pip install llama-cpp-python``) has no variant
files and is used as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from mdmem.util.errors import ProviderError

INSTALL_HINT = "install the local extra: pip install 'mdmem[local]'"
# Most to least capable x86 levels (llama.cpp's GGML_CPU_ALL_VARIANTS names); others sort after, by name.
VARIANT_ORDER = (
    "sapphirerapids",
    "zen4",
    "cooperlake",
    "icelake",
    "cascadelake",
    "cannonlake",
    "skylakex",
    "alderlake",
    "haswell",
    "piledriver",
    "ivybridge",
    "sandybridge",
    "sse42",
    "x64",
)
_VARIANT_FILE = re.compile(r"^libggml-cpu-(.+)\.so$")
_lock = threading.Lock()
_loaded: str | None = None  # the variant loaded into this process ("builtin" for a linked-in backend)


def available() -> bool:
    """True when llama-cpp-python can be found (not imported: that loads its libraries)."""
    import importlib.util

    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def loaded() -> bool:
    """True when this process has llama-cpp-python's ``libllama`` mapped (imported, whatever sys.modules says)."""
    return mapped_library("libllama.") is not None


def import_llama_cpp() -> ModuleType:
    """``import llama_cpp``, mapping a missing or broken install to ProviderError with the fix."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise ProviderError(f"the local provider needs llama-cpp-python: {INSTALL_HINT}") from exc
    except OSError as exc:  # the package is there but its shared library does not load
        raise ProviderError(f"llama-cpp-python is broken ({exc}): reinstall it: {INSTALL_HINT}") from exc
    return llama_cpp


def _package_dir(llama_cpp: ModuleType) -> Path:
    return Path(os.path.abspath(os.path.dirname(llama_cpp.__file__ or ".")))


def library_dir(llama_cpp: ModuleType) -> Path:
    """The folder holding the CPU backend variants (``libllama.so``'s own folder for other builds).

    llama-cpp-python's wheel installs ``libllama.so`` in ``llama_cpp/lib`` but ggml's backend modules in a
    ``bin`` folder at the root of site-packages, so both places are searched.
    """
    package = _package_dir(llama_cpp)
    for folder in (package / "lib", package.parent / "bin", package.parent / "lib"):
        if variants(folder):
            return folder
    return package / "lib"


def variants(lib_dir: Path) -> list[str]:
    """CPU backend variants shipped in ``lib_dir``, most capable first; [] for a linked-in backend."""
    try:
        names = [m.group(1) for n in os.listdir(lib_dir) if (m := _VARIANT_FILE.match(n))]
    except OSError:
        return []
    rank = {name: i for i, name in enumerate(VARIANT_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def library_fingerprint(llama_cpp: ModuleType) -> str:
    """Identifies the installed build: version plus name, size and mtime of every shared library."""
    package = _package_dir(llama_cpp)
    parts = [str(getattr(llama_cpp, "__version__", "?"))]
    for folder in dict.fromkeys((package / "lib", library_dir(llama_cpp))):
        try:
            for name in sorted(os.listdir(folder)):
                if ".so" in name or name.endswith((".dylib", ".dll")):
                    st = os.stat(folder / name)
                    parts.append(f"{folder.name}/{name}:{st.st_size}:{int(st.st_mtime)}")
        except OSError:
            pass
    return "|".join(parts)


def load_llama_cpp(variant: str | None = None) -> tuple[ModuleType, str]:
    """Import llama_cpp and make sure a CPU backend is loaded; returns (module, variant in use).

    ``variant`` None loads the best-scored variant for this CPU. Once a backend is loaded into the process
    it stays: a later call with another variant gets the one already loaded.
    """
    global _loaded
    llama_cpp = import_llama_cpp()
    with _lock:
        if _loaded is not None:
            return llama_cpp, _loaded
        _quiet(llama_cpp)
        lib = library_dir(llama_cpp)
        shipped = variants(lib)
        if not shipped:
            _loaded = "builtin"
            return llama_cpp, _loaded
        ggml = _libggml(llama_cpp)
        if ggml.ggml_backend_reg_count() == 0:
            if variant is None:
                ggml.ggml_backend_load_all_from_path(str(lib).encode())
            else:
                if variant not in shipped:
                    raise ProviderError(
                        f"llama.cpp CPU backend {variant!r} is not in {lib} (shipped: {', '.join(shipped)})"
                    )
                if not ggml.ggml_backend_load(str(lib / f"libggml-cpu-{variant}.so").encode()):
                    raise ProviderError(f"llama.cpp CPU backend {variant!r} does not support this CPU")
        if ggml.ggml_backend_reg_count() == 0:
            raise ProviderError(
                f"llama.cpp found no CPU backend it can run in {lib}: reinstall llama-cpp-python ({INSTALL_HINT})"
            )
        _loaded = loaded_variant() or variant or "unknown"
        return llama_cpp, _loaded


def _quiet(llama_cpp: ModuleType) -> None:
    """Keep llama.cpp's info lines ("load_backend: loaded CPU backend ...") off the user's terminal.

    llama-cpp-python's log callback prints every level until a model is created with ``verbose=False``;
    errors still print.
    """
    with contextlib.suppress(Exception):  # a private module: its absence only costs a log line
        from llama_cpp import _logger

        if _logger.logger.level == logging.NOTSET:
            _logger.set_verbose(False)


def loaded_variant() -> str | None:
    """Which ``libggml-cpu-*.so`` this process has mapped (Linux), if any."""
    path = mapped_library("libggml-cpu-")
    m = _VARIANT_FILE.match(os.path.basename(path)) if path else None
    return m.group(1) if m else None


def mapped_library(prefix: str) -> str | None:
    """The path of the first shared library mapped into this process whose name starts with ``prefix``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(" ")[-1]
                if path.startswith("/") and os.path.basename(path).startswith(prefix):
                    return path
    except OSError:
        pass
    return None


def _libggml(llama_cpp: ModuleType) -> ctypes.CDLL:
    """The ``libggml`` that ``libllama`` is linked to (its backend registry is the one llama.cpp reads).

    The wheel holds ``libggml.so`` and ``libggml.so.0`` as two copies of one file: opening the other copy
    (as ``llama_cpp._ggml`` does) would load a second registry that llama.cpp never sees.
    """
    mapped = mapped_library("libggml.so")
    package = _package_dir(llama_cpp)
    libggml = ctypes.CDLL(mapped or str(package / "lib" / "libggml.so.0"))
    libggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    libggml.ggml_backend_reg_count.argtypes = []
    libggml.ggml_backend_load_all_from_path.restype = None
    libggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    libggml.ggml_backend_load.restype = ctypes.c_void_p
    libggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    return libggml


def open_model(llama_cpp: ModuleType, path: str, n_ctx: int, threads: int) -> Any:
    """A ``llama_cpp.Llama`` for embeddings with the settings measured fastest for short sequences.

    ``n_batch`` and ``n_ubatch`` equal ``n_ctx``: one sequence is decoded in one micro-batch (llama.cpp
    aborts the process when a sequence is longer than ``n_ubatch``; callers truncate to ``n_ctx`` first).
    """
    return llama_cpp.Llama(
        model_path=str(path),
        embedding=True,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        flash_attn=True,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
