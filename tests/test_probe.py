"""The crash probe and the portable llama.cpp loader.

A child process killed by SIGILL is made for real: a stand-in interpreter that kills itself with SIGILL
(``os.kill(os.getpid(), SIGILL)``) exactly where a llama.cpp build using instructions the CPU lacks would
die. The probe's real child (``python -m mdmem.providers.probe``) is exercised with the tiny GGUF.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mdmem.memory import Memory
from mdmem.providers import native, probe
from mdmem.util.errors import ProviderError
from tests.conftest import write

llama_cpp = pytest.importorskip("llama_cpp")


def stand_in_python(tmp_path: Path, behaviour: dict[str, str]) -> tuple[str, Path]:
    """An executable that stands in for ``sys.executable`` in the probe's child.

    ``behaviour`` maps the requested variant ("auto" for none) to "ok", "ill" (report the variant, then die
    by SIGILL, as a crashing llama.cpp does) or "unsupported". Every run is logged to the returned file.
    """
    log = tmp_path / "runs.log"
    script = tmp_path / "fake_probe.py"
    script.write_text(
        "import json, os, signal, sys\n"
        f"behaviour = {behaviour!r}\n"
        "args = json.loads(sys.argv[-1])\n"
        "asked = args['variant'] or 'auto'\n"
        f"open({str(log)!r}, 'a').write(asked + '\\n')\n"
        "what = behaviour.get(asked, 'ok')\n"
        "if what == 'unsupported':\n"
        "    print(json.dumps({'ok': False, 'error': 'not this CPU'})); sys.exit(3)\n"
        "print(json.dumps({'variant': behaviour.get('auto-variant', asked) if asked == 'auto' else asked}),"
        " flush=True)\n"
        "if what == 'ill':\n"
        "    os.kill(os.getpid(), signal.SIGILL)\n"
        "print(json.dumps({'ok': True}))\n"
    )
    wrapper = tmp_path / "python-stand-in"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


def runs(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_variants_are_ordered_most_capable_first(tmp_path: Path) -> None:
    for name in ("libggml-cpu-x64.so", "libggml-cpu-haswell.so", "libggml-cpu-zen4.so", "libggml-base.so"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "libggml-cpu-future.so").write_bytes(b"")
    assert native.variants(tmp_path) == ["zen4", "haswell", "x64", "future"]
    assert native.variants(tmp_path / "missing") == []


def test_the_real_probe_loads_the_tiny_model_and_caches_the_result(tiny_gguf: Path, probe_cache: Path) -> None:
    before = set(probe_cache.iterdir())
    assert probe.ensure_runs(tiny_gguf, 64, 1) is None  # llama.cpp's own choice works on this CPU
    written = set(probe_cache.iterdir()) - before
    if written:  # (another test may have probed this model already in this session)
        entry = json.loads(written.pop().read_text())
        assert entry["ok"] is True and entry["tried"] == []
    # cached: a stand-in that would crash is never started
    crash, log = stand_in_python(probe_cache.parent, {"auto": "ill"})
    assert probe.ensure_runs(tiny_gguf, 64, 1, python=crash) is None
    assert runs(log) == []


def test_a_child_killed_by_sigill_becomes_a_provider_error_naming_the_signal_and_the_fix(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "cache"))
    every = {"auto": "ill", **{v: "ill" for v in native.variants(native.library_dir(llama_cpp))}}
    crash, log = stand_in_python(tmp_path, every)
    with pytest.raises(ProviderError) as err:
        probe.ensure_runs(tiny_gguf, 64, 1, python=crash)
    message = str(err.value)
    assert "SIGILL" in message and tiny_gguf.name in message
    assert "make test" in message and "GGML_CPU_ALL_VARIANTS" in message
    tried = runs(log)
    assert tried[0] == "auto"
    # the failure is cached for this build, model and CPU: no second crash on the next start
    with pytest.raises(ProviderError, match="SIGILL"):
        probe.ensure_runs(tiny_gguf, 64, 1, python=crash)
    assert runs(log) == tried


def test_the_probe_steps_down_to_a_variant_that_runs(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = native.variants(native.library_dir(llama_cpp))
    if len(shipped) < 3:
        pytest.skip("llama-cpp-python is not a portable build (no CPU backend variants shipped)")
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "cache"))
    # The best-scored variant advertises features it cannot run (AMX in some VMs); the next is not
    # supported at all; the one after runs.
    behaviour = {"auto-variant": shipped[0], "auto": "ill", shipped[1]: "unsupported", shipped[2]: "ok"}
    stand_in, log = stand_in_python(tmp_path, behaviour)
    assert probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in) == shipped[2]
    assert runs(log) == ["auto", shipped[1], shipped[2]]
    assert probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in) == shipped[2]  # cached
    assert len(runs(log)) == 3


def test_a_crashing_local_model_hands_over_to_the_fallback_and_the_process_lives(
    tiny_gguf: Path, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, fake_openai
) -> None:
    pytest.importorskip("openai")
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "cache"))
    every = {"auto": "ill", **{v: "ill" for v in native.variants(native.library_dir(llama_cpp))}}
    crash, log = stand_in_python(tmp_path, every)
    monkeypatch.setattr(sys, "executable", crash)  # the probe's child is started with sys.executable
    write(workspace / "MEMORY.md", "# Notes\n\nThe backups run at 02:00 every night.\n")
    config = tmp_path / "config.json5"
    memory_search = {
        "provider": "local",
        "fallback": "openai",
        "local": {"modelPath": str(tiny_gguf), "threads": 1},
        "remote": {"baseUrl": fake_openai.url, "dimensions": 8, "maxRetries": 0},
    }
    body = {"agents": {"defaults": {"workspace": str(workspace), "memorySearch": memory_search}}}
    config.write_text(json.dumps(body))
    first = native.loaded_variant() or "auto"  # a process that runs a backend already probes on that one
    with Memory.open(config_path=config) as mem:
        report = mem.sync()
        assert report["indexed"] == 1
        found = mem.search("when do the backups run")
        assert found["provider"] == "openai" and found["mode"] == "hybrid"
        assert "SIGILL" in found["fallback"]["reason"] and found["fallback"]["from"] == "local"
        assert found["results"][0]["path"] == "MEMORY.md"
        assert "SIGILL" in mem.status()["fallback"]["reason"]
    assert runs(log)[0] == first  # the crash happened in the probe's child; this process lives on


def test_loading_twice_keeps_the_first_backend() -> None:
    module, first = native.load_llama_cpp()
    again, second = native.load_llama_cpp("x64")
    assert module is again and first == second
    if native.variants(native.library_dir(module)):
        assert first in native.variants(native.library_dir(module))
        assert native.loaded_variant() == first


def test_a_second_model_is_probed_on_the_backend_the_process_already_runs(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on an Intel VM advertising AMX: its best backend ran an f16 model and died on a Q8_0 one. A process
    that loaded that backend for the first model must not load the second on it: a ProviderError, not SIGILL."""
    monkeypatch.setenv("MDMEMORY_PROBE_CACHE", str(tmp_path / "cache"))
    stand_in, log = stand_in_python(tmp_path, {"haswell": "ok", "sapphirerapids": "ill"})
    assert probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in, loaded="haswell") == "haswell"
    with pytest.raises(ProviderError) as err:
        probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in, loaded="sapphirerapids")
    message = str(err.value)
    assert "SIGILL" in message and "sapphirerapids" in message and "process of their own" in message
    assert runs(log) == ["haswell", "sapphirerapids"]  # only the loaded backend is tried, never another
    with pytest.raises(ProviderError, match="sapphirerapids"):  # cached: no second crash
        probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in, loaded="sapphirerapids")
    assert probe.ensure_runs(tiny_gguf, 64, 1, python=stand_in, loaded="haswell") == "haswell"
    assert len(runs(log)) == 2
