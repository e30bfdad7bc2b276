"""A newcomer's first ten minutes, timed: fresh venv -> wheel install with the local extra -> init -> index -> search.

    python benchmarks/first_search.py [--model ../shared/models/all-MiniLM-L6-v2-Q8_0.gguf] [--keep DIR]

The wheel is built from this tree first (``pip wheel --no-deps``, not timed: a user gets it from the package
index). Then, timed step by step, in a temporary folder with its own MDMEMORY_HOME and crash-probe cache (so
nothing from an earlier run helps):

1. ``python -m venv``                              a fresh virtualenv
2. ``pip install 'mdmem-*.whl[local]'``         the wheel with the local extra (xllamacpp: no compile),
                                                     from the package index pip is configured with here
3. ``mdmem init WS --model MODEL``              a workspace and a config pointing at the model file
4. ``mdmem index``                              the workspace (workspace-template's notes copied in)
5. ``mdmem search --json QUERY``                the first hybrid search (checked: mode "hybrid")

The model file is at hand (no download): what is timed is the install and the first use. Target: two minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MDMEMORY_TEST_SHARED") or ROOT.parent / "shared")  # a worktree points here
DEFAULT_MODEL = SHARED / "models" / "all-MiniLM-L6-v2-Q8_0.gguf"
QUERY = "when do the backups run"
TARGET_SECONDS = 120.0


def step(name: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    print(f"  {name:<44s} {took:6.1f} s", flush=True)
    return took, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a GGUF embedding model file")
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it")
    args = parser.parse_args()
    if not args.model.is_file():
        raise SystemExit(f"no model file {args.model}: pass --model PATH to a .gguf embedding model")
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="mdmemory-first-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        run(tmp, args.model.resolve())
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def run(tmp: Path, model: Path) -> None:
    wheels = tmp / "dist"
    print(f"building the wheel of {ROOT} (not timed)", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(ROOT)], check=True
    )
    wheel = next(wheels.glob("mdmem-*.whl"))
    venv, ws = tmp / "venv", tmp / "notes"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MDMEMORY_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        MDMEMORY_HOME=str(tmp / "home"),
        MDMEMORY_PROBE_CACHE=str(tmp / "probe-cache"),
        MDMEMORY_DAEMON="off",
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    ws.mkdir()
    print(f"timing from a fresh virtualenv to the first hybrid search ({tmp})", flush=True)
    times = [step("python -m venv", [sys.executable, "-m", "venv", str(venv)], env, tmp)[0]]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    times.append(step(f"pip install '{wheel.name}[local]'", [*pip, f"{wheel}[local]"], env, tmp)[0])
    times.append(step("mdmem init notes --model MODEL", ["mdmem", "init", str(ws), "--model", str(model)], env, tmp)[0])
    template = ROOT / "workspace-template"  # a few weeks of notes, as a user would have written by now
    with open(ws / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write((template / "MEMORY.md").read_text(encoding="utf-8"))
    for log in (template / "memory").glob("*.md"):
        shutil.copy(log, ws / "memory" / log.name)
    took, out = step("mdmem index", ["mdmem", "index", "--json"], env, ws)
    times.append(took)
    report = json.loads(out)
    took, out = step(f'mdmem search "{QUERY}"', ["mdmem", "search", "--json", QUERY], env, ws)
    times.append(took)
    result = json.loads(out)
    if result.get("mode") != "hybrid" or not result.get("results"):
        raise SystemExit(f"the search was not a hybrid search with results: {json.dumps(result)[:500]}")
    total = sum(times)
    verdict = "met" if total <= TARGET_SECONDS else "MISSED"
    print(f"  {'total':<44s} {total:6.1f} s  (target {TARGET_SECONDS:.0f} s: {verdict})")
    top = result["results"][0]
    print(
        f"indexed {report['indexed']} files, {report['embedded']} inputs embedded; top hit {top['path']}:"
        f"{top['startLine']}-{top['endLine']} via {result['provider']} ({_binding(venv)})"
    )


def _binding(venv: Path) -> str:
    code = "from mdmem.providers.local import choose_binding; print(choose_binding())"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-200:]


if __name__ == "__main__":
    main()
