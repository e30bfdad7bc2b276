"""Crash probe: load a GGUF model and embed one string in a child process before this process does.

A llama.cpp build that uses instructions the CPU cannot run does not raise: it kills the process with
SIGILL (seen on VMs that advertise AMX, and with builds forcing AVX-VNNI on AMD EPYC). A daemon, an MCP
server or a search that loads such a build dies with it. So before a process first loads a model, a child
(``python -m mdmem.providers.probe``) loads it and embeds one string. If the child is killed by a
signal, the probe steps down through the CPU backend variants a portable build ships
(``mdmem.providers.native``) until one works; if none does, the parent gets a ProviderError naming the
signal and the fix, and its fallback provider takes over while the process lives on.

The xllamacpp binding (``mdmem.providers.xllama``) ships one library (AVX2 on x86): its probe
(``ensure_runs_xllamacpp``) has no variant to step down to, and a crash names the compiled binding as the fix.

Results are cached per library build, model file and CPU (``$MDMEMORY_PROBE_CACHE``, default
``~/.cache/mdmemory/probe``), so the probe runs once, not on every start. A timed-out probe is not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mdmem.providers import native, xllama
from mdmem.util.errors import ProviderError

PROBE_TIMEOUT_SECONDS = 180.0
PROBE_TEXT = "mdmem probe: the quick brown fox"
_UNSUPPORTED = 3  # the child's exit code when the requested variant does not support this CPU


def cache_dir() -> Path:
    override = os.environ.get("MDMEMORY_PROBE_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mdmemory" / "probe"


def cpu_identity() -> str:
    """The CPU model and feature flags (Linux), so a cached result never outlives a move to another CPU."""
    model = flags = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.strip()
                if model and flags:
                    break
    return f"{model}|{flags}"


def cpu_name() -> str:
    return cpu_identity().split("|", 1)[0] or "unknown CPU"


def ensure_runs(
    model: Path, n_ctx: int, threads: int, *, python: str | None = None, loaded: str | None = None
) -> str | None:
    """Make sure loading ``model`` and embedding with it does not crash this process.

    Returns the CPU backend variant to load (None: llama.cpp's own choice or a linked-in backend).
    Raises ProviderError when every variant crashes, naming the signal and the fix.

    ``loaded`` is the variant this process already runs (``native.loaded_variant()``): a backend cannot be
    unloaded, so the model is probed on that one alone (seen: an AMX build that runs f16 models dies on a
    Q8_0 one, which needs a lower variant), and a crash there is a ProviderError, not the process's death.
    """
    if loaded is not None:
        return _ensure_runs_on(model, n_ctx, threads, python or sys.executable, loaded)
    llama_cpp = native.import_llama_cpp()
    shipped = native.variants(native.library_dir(llama_cpp))
    entry = _cache_entry(native.library_fingerprint(llama_cpp), model, n_ctx)
    cached = _read(entry)
    if cached is not None:
        if cached.get("ok"):
            return cached.get("variant")
        raise ProviderError(cached["error"])
    python = python or sys.executable
    outcome = _run(python, model, n_ctx, threads, None)
    tried: list[str] = []
    if outcome["signal"] and shipped:
        crashed = outcome.get("variant")
        tried.append(f"{crashed or 'auto'}: {outcome['signal']}")
        lower = shipped[shipped.index(crashed) + 1 :] if crashed in shipped else shipped
        for variant in lower:
            outcome = _run(python, model, n_ctx, threads, variant)
            if outcome["ok"]:
                break
            if outcome["signal"]:
                tried.append(f"{variant}: {outcome['signal']}")
    if outcome["ok"]:
        working: str | None = outcome.get("variant") if tried else None
        _write(entry, {"ok": True, "variant": working, "tried": tried, "at": time.time()})
        return working
    if outcome["signal"]:
        error = (
            f"llama.cpp was killed by {outcome['signal']} while loading {model.name} on this CPU ({cpu_name()})"
            + (f"; CPU backends tried: {', '.join(tried)}" if tried else "")
            + ": the installed llama-cpp-python uses instructions this CPU cannot run. Rebuild it for this "
            "machine (`make test` builds a portable one, or `CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON "
            "-DGGML_CPU_ALL_VARIANTS=ON' pip install --force-reinstall --no-cache-dir llama-cpp-python`), or "
            "use another memorySearch.provider"
        )
        _write(entry, {"ok": False, "error": error, "at": time.time()})
        raise ProviderError(error)
    if outcome.get("timeout"):
        raise _timed_out(model)
    # The child failed without crashing (a damaged file...): loading in-process raises the same error cleanly.
    return None


def _ensure_runs_on(model: Path, n_ctx: int, threads: int, python: str, variant: str) -> str:
    """``ensure_runs`` for a process that already loaded the CPU backend ``variant``."""
    entry = _cache_entry(native.library_fingerprint(native.import_llama_cpp()), model, n_ctx, f"on {variant}")
    cached = _read(entry)
    if cached is None:
        outcome = _run(python, model, n_ctx, threads, variant)
        if outcome.get("timeout"):
            raise _timed_out(model)
        if not outcome["ok"] and not outcome["signal"]:
            return variant  # failed without crashing (a damaged file): loading in-process raises it cleanly
        if outcome["signal"]:
            cached = {
                "ok": False,
                "at": time.time(),
                "error": f"llama.cpp is killed by {outcome['signal']} running {model.name} on its {variant} CPU "
                f"backend, which this process already loaded for another model (a backend cannot be unloaded; "
                f"{model.name} needs a lower one on this CPU, {cpu_name()}): give the agents of this model a "
                "process of their own (another `mdmem serve` or `watch`), or use one model type for all",
            }
        else:
            cached = {"ok": True, "variant": variant, "at": time.time()}
        _write(entry, cached)
    if not cached.get("ok"):
        raise ProviderError(cached["error"])
    return variant


def ensure_runs_xllamacpp(model: Path, n_ctx: int, threads: int, *, python: str | None = None) -> None:
    """``ensure_runs`` for the xllamacpp binding: load ``model`` and embed with it in a child first.

    Raises ProviderError naming the signal and the fix when the child is killed (its one prebuilt library
    uses instructions this CPU lacks)."""
    entry = _cache_entry(xllama.fingerprint(), model, n_ctx, xllama.NAME)
    cached = _read(entry)
    if cached is None:
        outcome = _run(python or sys.executable, model, n_ctx, threads, None, xllama.NAME)
        if outcome.get("timeout"):
            raise _timed_out(model)
        if not outcome["signal"]:
            if outcome["ok"]:
                _write(entry, {"ok": True, "at": time.time()})
            return  # failed without crashing (a damaged file): loading in-process raises it cleanly
        cached = {
            "ok": False,
            "at": time.time(),
            "error": f"llama.cpp (xllamacpp) was killed by {outcome['signal']} while loading {model.name} on this "
            f"CPU ({cpu_name()}): xllamacpp's prebuilt library uses instructions this CPU cannot run. Fix: build "
            "llama-cpp-python for this machine (`make local-fast` in a clone, or `CMAKE_ARGS='-DGGML_NATIVE=OFF "
            "-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON' pip install llama-cpp-python`; mdmem uses it "
            "when installed), or use another memorySearch.provider",
        }
        _write(entry, cached)
    if not cached.get("ok"):
        raise ProviderError(cached["error"])


def _cache_entry(build: str, model: Path, n_ctx: int, *extra: str) -> Path:
    """Where a probe's outcome is kept: keyed by the llama.cpp build (``build``, a library fingerprint), the
    model file, the context size, the CPU and Python (and ``extra``, e.g. the backend the process loaded
    already)."""
    try:
        st = os.stat(model)
    except OSError as exc:
        raise ProviderError(f"cannot read model file {model}: {exc.strerror or exc}") from exc
    key_src = json.dumps(
        [build, os.path.realpath(model), st.st_size, int(st.st_mtime), n_ctx] + [cpu_identity(), sys.version, *extra]
    )
    return cache_dir() / (hashlib.sha256(key_src.encode()).hexdigest()[:32] + ".json")


def _timed_out(model: Path) -> ProviderError:
    return ProviderError(
        f"loading {model.name} in a probe process took over {PROBE_TIMEOUT_SECONDS:.0f} s: "
        "is the model file on a slow or hung filesystem?"
    )


def _run(
    python: str, model: Path, n_ctx: int, threads: int, variant: str | None, binding: str | None = None
) -> dict[str, Any]:
    args = json.dumps({"model": str(model), "n_ctx": n_ctx, "threads": threads, "variant": variant, "binding": binding})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    try:
        proc = subprocess.run(
            [python, "-m", "mdmem.providers.probe", args],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "signal": None, "timeout": True}
    except OSError as exc:
        raise ProviderError(f"cannot start the model probe process ({python}): {exc}") from exc
    out: dict[str, Any] = {}
    for line in proc.stdout.splitlines():
        with contextlib.suppress(ValueError):
            out.update(json.loads(line))
    sig = None
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
    return {"ok": proc.returncode == 0 and bool(out.get("ok")), "signal": sig, "variant": out.get("variant")}


def _read(entry: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(entry.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and ("ok" in data) else None


def _write(entry: Path, data: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs a probe next time
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, entry)


def _child(raw: str) -> int:
    """The probe itself: load the backend, say which, load the model, embed one string."""
    args = json.loads(raw)
    if args.get("binding") == xllama.NAME:
        return _child_xllamacpp(args)
    try:
        llama_cpp, variant = native.load_llama_cpp(args["variant"])
    except ProviderError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
        return _UNSUPPORTED if args["variant"] else 1
    print(json.dumps({"variant": variant}), flush=True)  # before anything that may crash
    llm = native.open_model(llama_cpp, args["model"], args["n_ctx"], max(1, min(int(args["threads"]), 2)))
    llm.embed(PROBE_TEXT, normalize=False, truncate=True)
    print(json.dumps({"ok": True}), flush=True)
    return 0


def _child_xllamacpp(args: dict[str, Any]) -> int:
    from mdmem.providers.model_files import read_gguf_header

    path = Path(args["model"])
    header = read_gguf_header(path)
    n_embd = header.get(f"{header.get('general.architecture')}.embedding_length")
    print(json.dumps({"variant": xllama.NAME}), flush=True)  # before anything that may crash
    model = xllama.XllamaModel(str(path), args["n_ctx"], max(1, min(int(args["threads"]), 2)), int(n_embd or 1))
    try:
        model.embed([PROBE_TEXT])
    finally:
        model.close()
    print(json.dumps({"ok": True}), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - runs in the child process
    sys.exit(_child(sys.argv[1]))
