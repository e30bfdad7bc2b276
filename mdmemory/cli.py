"""Command line: ``mdmemory index|search|get|status``. The only module that prints or sets exit codes.

Exit codes: 0 ok, 2 usage or configuration error, 1 runtime error. Every command takes ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from mdmemory import __version__  # noqa: I001
from mdmemory.cli_agent import register as register_agent_commands
from mdmemory.errors import ConfigError, MdMemoryError
from mdmemory.memory import Memory

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 on usage errors; keep that, add a hint
        self.print_usage(sys.stderr)
        print(f"mdmemory: error: {message} (see `mdmemory --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--config", help="config file (default: $MDMEMORY_CONFIG or ~/.mdmemory/config.json5)")
    common.add_argument("--agent", help="agent id from agents.list (default: the default agent)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(prog="mdmemory", description="Durable Markdown memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"mdmemory {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("index", parents=[common], help="index new and changed memory files")
    p.add_argument("--force", action="store_true", help="rebuild the whole index")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the detached worker (mdmemory.worker)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="search memory (memory_search)")
    p.add_argument("query")
    p.add_argument("--max-results", type=int, default=None, metavar="N")
    p.add_argument("--min-score", type=float, default=None, metavar="X")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("get", parents=[common], help="read a memory file or some of its lines (memory_get)")
    p.add_argument("path")
    p.add_argument("--from", dest="from_line", type=int, default=None, metavar="N", help="first line, 1-based")
    p.add_argument("--lines", type=int, default=None, metavar="N", help="how many lines")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("status", parents=[common], help="show index state, staleness and warnings")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("session-start", parents=[common], help="sync the index at the start of an agent session")
    p.set_defaults(func=cmd_session_start)

    p = sub.add_parser("watch", help="keep indexes fresh: watch files and sync (one JSON log line per event)")
    p.add_argument("--config", help="config file (default: $MDMEMORY_CONFIG or ~/.mdmemory/config.json5)")
    p.add_argument("--agent", action="append", default=[], help="agent id; repeat for several (default: all)")
    p.add_argument("--polling", action="store_true", help="poll for changes instead of native file events")
    p.add_argument("--json", action="store_true", help="accepted for symmetry: log lines are always JSON")
    p.set_defaults(func=None, command_main=watch_main)

    model = sub.add_parser("model", help="download or convert local embedding models")
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=_Parser)
    p = msub.add_parser("pull", parents=[common], help="download a GGUF model ahead of time")
    p.add_argument("uri", nargs="?", help="hf:owner/repo/file.gguf (default: memorySearch.local.modelPath)")
    p.set_defaults(func=cmd_model_pull)
    p = msub.add_parser("convert", parents=[common], help="convert a sentence-transformers BERT folder to GGUF")
    p.add_argument("src", help="folder with config.json, vocab.txt, model.safetensors")
    p.add_argument("out", help="the .gguf file to write")
    p.add_argument("--type", dest="out_type", choices=["f32", "f16", "q8_0"], default="f16")
    p.set_defaults(func=cmd_model_convert, needs_memory=False)

    register_agent_commands(sub, common)
    return parser


# -- commands ------------------------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    if args.worker:
        from mdmemory import worker

        return worker.run(mem), _format_index
    bar = None
    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=0, unit="file", file=sys.stderr, leave=False)

        def progress(done: int, total: int, path: str) -> None:
            bar.total = total
            bar.set_postfix_str(path[-40:], refresh=False)
            bar.update(done - bar.n)

    try:
        report = mem.sync(force=args.force, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    return report, _format_index


def _format_index(r: dict[str, Any]) -> str:
    lines = [
        f"{r['files']} files ({r['indexed']} indexed, {r['unchanged']} unchanged, {r['removed']} removed), "
        f"{r['chunks']} chunks written, {r['embedded']} embedded, {r['from_cache']} from cache, "
        f"{len(r['skipped'])} skipped, {r['seconds']:.2f} s" + (" (full rebuild)" if r["rebuilt"] else "")
    ]
    lines += [f"skipped {s['path']}: {s['reason']}" for s in r["skipped"]]
    lines += [f"error {e['path']}: {e['error']}" for e in r["errors"]]
    if r.get("pending"):
        lines.append(f"{r['pending']} chunk(s) waiting for embeddings (found by keywords meanwhile)")
    if r.get("deferred"):
        lines.append(f"{r['deferred']} changed file(s) left for the next sync")
    return "\n".join(lines)


def cmd_search(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    if args.max_results is not None and args.max_results < 1:
        raise ConfigError("--max-results must be at least 1")
    if args.min_score is not None and not 0 <= args.min_score <= 1:
        raise ConfigError("--min-score must be between 0 and 1")
    mem.background = "worker"  # this process exits after answering: leftover indexing goes to a detached worker
    return mem.search(args.query, max_results=args.max_results, min_score=args.min_score), _format_search


def _format_search(r: dict[str, Any]) -> str:
    head = f"{len(r['results'])} result(s) · {r['mode']} · provider {r['provider']}"
    if r.get("model"):
        head += f" ({r['model']})"
    out = [head]
    for i, hit in enumerate(r["results"], start=1):
        out.append(f"\n{i}. {hit['path']}:{hit['startLine']}-{hit['endLine']}  score {hit['score']:.3f}")
        out.extend("   " + line for line in hit["snippet"].splitlines())
    for note in r.get("warnings", []):
        out.append(f"\nnote: {note}")
    if r.get("fallback"):
        out.append(f"note: fell back from {r['fallback']['from']}: {r['fallback']['reason']}")
    return "\n".join(out)


def cmd_get(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    return mem.get(args.path, from_line=args.from_line, lines=args.lines), lambda r: r["text"]


def cmd_status(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    return mem.status(), _format_status


def cmd_session_start(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    result = mem.session_start()

    def fmt(r: dict[str, Any]) -> str:
        head = _format_index(r["sync"]) if r["sync"] else "sync on session start is off (sync.onSessionStart)"
        return head + "\n" + _format_status(r["status"])

    return result, fmt


def watch_main(args: argparse.Namespace) -> int:
    """Run the watch daemon until SIGINT/SIGTERM; every event is one JSON line on stdout."""
    import signal
    import threading

    from mdmemory import daemon
    from mdmemory.config import load_config

    stop = threading.Event()
    lock = threading.Lock()

    def emit(event: dict[str, Any]) -> None:
        line = json.dumps({"ts": round(time.time(), 3), **event}, ensure_ascii=False)
        with lock:
            print(line, flush=True)

    def on_signal(signum: int, _frame: object) -> None:
        emit({"event": "stopping", "signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        config = load_config(args.config)
        daemon.run(config, args.agent, emit, stop, polling=True if args.polling else None)
    except ConfigError as exc:
        return _fail(exc, EXIT_USAGE, True)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, True)
    return EXIT_OK


def cmd_model_pull(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    from mdmemory.providers.factory import model_cache_dir
    from mdmemory.providers.local import pull_model

    uri = args.uri or mem.settings.model or mem.settings.local.model_path
    cache = model_cache_dir(mem.settings, mem.agent.home)
    path = pull_model(uri, cache)
    return {"uri": uri, "path": str(path), "bytes": path.stat().st_size}, lambda r: f"{r['uri']} -> {r['path']}"


def cmd_model_convert(
    args: argparse.Namespace, mem: Memory | None
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    from mdmemory.convert import convert_bert

    out = convert_bert(args.src, args.out, out_type=args.out_type)
    result = {"source": args.src, "path": str(out), "type": args.out_type, "bytes": out.stat().st_size}
    return result, lambda r: f"wrote {r['path']} ({r['type']}, {r['bytes']} bytes)"


def _format_status(s: dict[str, Any]) -> str:
    lines = [
        f"agent       {s['agent']}",
        f"workspace   {s['workspace']}",
        f"store       {s['store']}",
        f"provider    {s['provider']}"
        + (f" ({s['model']}, {s['dims']} dims)" if s["model"] else "")
        + f" · {s['mode']} search",
        f"indexed     {s['files']} files, {s['chunks']} chunks, {s['vectors']} vectors"
        + (f", {s['pendingEmbeddings']} chunk(s) waiting for embeddings" if s.get("pendingEmbeddings") else ""),
        f"last sync   {s['lastSync'] or 'never'}"
        + (f" ({s['lastSyncSeconds']:.2f} s)" if s["lastSyncSeconds"] is not None else ""),
        f"stale       {len(s['staleFiles'])} file(s)",
    ]
    lines += [f"  {f['state']:9} {f['path']}" for f in s["staleFiles"]]
    if s.get("worker"):
        lines.append(f"worker      pid {s['worker']['pid']} ({s['worker']['purpose']}) in the background")
    if s.get("fallback"):
        lines.append(f"fallback    from {s['fallback']['from']}: {s['fallback']['reason']}")
    lines += [f"warning     {w}" for w in s["warnings"]]
    return "\n".join(lines)


# -- entry point ---------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    as_json = getattr(args, "json", False)
    if getattr(args, "command_main", None) is not None:
        return int(args.command_main(args))
    try:
        if not getattr(args, "needs_memory", True):
            result, fmt = args.func(args, None)
        else:
            mem = Memory.open(agent=args.agent, config_path=args.config)
            try:
                result, fmt = args.func(args, mem)
            finally:
                mem.close()
    except ConfigError as exc:
        return _fail(exc, EXIT_USAGE, as_json)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, as_json)
    except KeyboardInterrupt:
        return _fail(MdMemoryError("interrupted"), EXIT_RUNTIME, as_json)
    try:
        if as_json:
            print(json.dumps(result, ensure_ascii=False, indent=2))
        elif result.get("error"):
            print(f"mdmemory: error: {result['error']}", file=sys.stderr)
        else:
            print(fmt(result))
        sys.stdout.flush()
    except BrokenPipeError:  # `mdmemory ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_RUNTIME if result.get("error") else EXIT_OK


def _fail(exc: BaseException, code: int, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": str(exc)}, ensure_ascii=False))
    print(f"mdmemory: error: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
