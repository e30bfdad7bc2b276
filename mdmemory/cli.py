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
from mdmemory.agent.schemas import check_search_arguments
from mdmemory.cli_agent import register as register_agent_commands
from mdmemory.cli_service import register as register_service_commands
from mdmemory.cli_store import register as register_store_commands
from mdmemory.display import display_name, display_text
from mdmemory.errors import ConfigError, InvalidArgumentError, MdMemoryError
from mdmemory.memory import Memory
from mdmemory.store.faults import human_size

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
    # The global options are accepted before the command too (`mdmemory --json status`). They get their own
    # dests: a subcommand's defaults would otherwise overwrite them; main() merges the two.
    parser.add_argument("--config", dest="global_config", metavar="CONFIG", help="config file, for any command")
    parser.add_argument("--agent", dest="global_agent", metavar="AGENT", help="agent id, for any command")
    parser.add_argument("--json", dest="global_json", action="store_true", help="print JSON, for any command")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("index", parents=[common], help="index new and changed memory files")
    p.add_argument("--force", action="store_true", help="rebuild the whole index (implies --prune)")
    p.add_argument("--prune", action="store_true", help="drop indexed files whose folder is missing")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the detached worker (mdmemory.worker)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="search memory (memory_search)")
    p.add_argument("query")
    p.add_argument("--max-results", type=int, default=None, metavar="N")
    p.add_argument("--min-score", type=float, default=None, metavar="X")
    p.add_argument("--kind", choices=["main", "group"], default="main", help="session kind (citations auto)")
    p.set_defaults(func=cmd_search, check=check_search)

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
    register_service_commands(sub, common)
    register_store_commands(sub, common, _Parser)
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
            bar.set_postfix_str(display_name(path)[-40:], refresh=False)
            bar.update(done - bar.n)

    try:
        report = mem.sync(force=args.force, progress=progress, prune=args.prune)
    finally:
        if bar is not None:
            bar.close()
    return report, _format_index


def _format_index(r: dict[str, Any]) -> str:
    if r.get("disabled"):
        return f"nothing indexed: {r['reason']}"
    lines = [
        f"{r['files']} files ({r['indexed']} indexed, {r['unchanged']} unchanged, {r['removed']} removed), "
        f"{r['chunks']} chunks written, {r['embedded']} embedded, {r['fromCache']} from cache, "
        f"{len(r['skipped'])} skipped, {r['seconds']:.2f} s" + (" (full rebuild)" if r["rebuilt"] else "")
    ]
    lines += [f"skipped {display_name(s['path'])}: {s['reason']}" for s in r["skipped"]]
    if r.get("held"):
        lines.append(f"kept {r['held']} indexed file(s) whose folder is missing (see `mdmemory status`)")
    lines += [f"error {display_name(e['path'])}: {e['error']}" for e in r["errors"]]
    if r.get("pending"):
        lines.append(f"{r['pending']} chunk(s) waiting for embeddings (found by keywords meanwhile)")
    if r.get("deferred"):
        lines.append(f"{r['deferred']} changed file(s) left for the next sync")
    if r.get("repaired"):
        lines.append(
            f"repaired: the corrupt index was moved aside to {r['repaired']['path']} and rebuilt from the files"
        )
    lines += [f"warning: {w}" for w in r.get("warnings", [])]
    return "\n".join(lines)


def check_search(args: argparse.Namespace) -> None:
    """The memory_search tool's bounds, checked before the config or the index is opened."""
    names = {"query": "QUERY", "maxResults": "--max-results", "minScore": "--min-score"}
    args.query, args.max_results, args.min_score = check_search_arguments(
        args.query, args.max_results, args.min_score, names
    )


def cmd_search(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    mem.background = "worker"  # this process exits after answering: leftover indexing goes to a detached worker
    result = mem.search(args.query, max_results=args.max_results, min_score=args.min_score, session_kind=args.kind)
    return result, _format_search


def _format_search(r: dict[str, Any]) -> str:
    head = f"{len(r['results'])} result(s) · {r['mode']} · provider {r['provider']}"
    if r.get("model"):
        head += f" ({r['model']})"
    out = [head]
    for i, hit in enumerate(r["results"], start=1):
        low = "  (low confidence)" if hit.get("lowConfidence") else ""
        where = f"{display_name(hit['path'])}:{hit['startLine']}-{hit['endLine']}"
        out.append(f"\n{i}. {where}  score {hit['score']:.3f}{low}")
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
        if r["status"].get("enabled") is False:
            head = "no sync: memory search is disabled (memorySearch.enabled is false)"
        return head + "\n" + _format_status(r["status"])

    return result, fmt


def watch_main(args: argparse.Namespace) -> int:
    """Run the watch daemon until SIGINT/SIGTERM; every event is one JSON line on stdout."""
    import queue
    import signal
    import threading

    from mdmemory.threads import single_threaded_blas

    single_threaded_blas()  # before anything imports numpy
    from mdmemory import daemon
    from mdmemory.config import load_config

    stop = threading.Event()
    # Lines go through a reentrant queue to one writer thread: the signal handler below runs on the main
    # thread, which may be inside emit() at that moment, so emit must never take a lock (a deadlock).
    lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def write_lines() -> None:
        while (line := lines.get()) is not None:
            print(line, flush=True)

    writer = threading.Thread(target=write_lines, name="mdmemory-log", daemon=True)
    writer.start()

    def emit(event: dict[str, Any]) -> None:
        lines.put(json.dumps({"ts": round(time.time(), 3), **event}, ensure_ascii=False))

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
    finally:
        lines.put(None)
        writer.join(10)
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
    files = "unknown (the index cannot be read)" if s["files"] is None else None
    lines = [
        f"agent       {s['agent']}",
        f"workspace   {s['workspace']}",
        "store       " + (f"{s['backend']}: " if s.get("backend", "sqlite") != "sqlite" else "") + str(s["store"]),
        f"provider    {s['provider']}"
        + (f" ({s['model']}, {s['dims']} dims)" if s["model"] else "")
        + (f", requested {s['requestedProvider']}" if s["requestedProvider"] not in (s["provider"], "auto") else "")
        + f" · {s['mode']} search",
        f"indexed     {files}"
        if files
        else f"indexed     {s['files']} files, {s['chunks']} chunks, {s['vectors']} vectors, "
        f"{s['cacheEntries']} cached embeddings",
        f"last sync   {s['lastSync'] or 'never'}"
        + (f" ({s['lastSyncSeconds']:.2f} s)" if s["lastSyncSeconds"] is not None else ""),
        f"stale       {len(s['staleFiles'])} file(s)" if files is None else "stale       unknown",
    ]
    if s["indexProvider"] and (s["indexProvider"], s["indexModel"]) != (s["provider"], s["model"]):
        built = s["indexProvider"] + (f" ({s['indexModel']})" if s["indexModel"] else "")
        lines.insert(5, f"index       built by {built}")
    lines += [f"  {f['state']:9} {f['path']}" for f in s["staleFiles"]]
    said = {d["message"] for d in s.get("degraded", [])}
    s = {**s, "warnings": [w for w in s.get("warnings", []) if w not in said]}  # once is loud enough
    for key, label, render in _STATUS_FIELDS:
        if s.get(key) not in (None, [], {}, ""):
            lines += [f"{label:<11} {text}" for text in render(s[key])]
    return "\n".join(lines)


def _store_state_lines(state: dict[str, Any]) -> list[str]:
    head = state["state"] + (f": {state['message']}" if state.get("message") else "")
    if state["state"] == "full" and state.get("freeBytes") is not None:
        head += f" ({human_size(state['freeBytes'])} free now)"
    moved = [f"corrupt index moved aside {m['at']} to {m['path']}, rebuilt from the files" for m in state["movedAside"]]
    return [head, *moved]


def _watcher_lines(w: dict[str, Any]) -> list[str]:
    if w.get("running"):
        line = f"running · {w.get('mode')} · pid {w.get('pid')}"
        if w.get("since"):
            line += f" · since {_iso(w['since'])}"
        if w.get("fallbackReason"):
            line += f" (polling because {w['fallbackReason']})"
        if w.get("armed") is False:
            line += f" · NOT watching: waiting for {w.get('waitingFor')} to exist"
        elif w.get("rearms"):
            line += f" · re-armed {w['rearms']} time(s)"
        return [line] + ([f"its last sync failed: {w['lastError']}"] if w.get("lastError") else [])
    if w.get("lastPid"):
        return [f"not running (pid {w['lastPid']} last seen {_iso(w.get('lastHeartbeat') or 0)})"]
    return ["not running (`mdmemory watch` keeps the index fresh)"]


def _plain(value: Any) -> list[str]:
    """Any other status value as text: a list item per line, a dict as key=value pairs."""
    if isinstance(value, list):
        return [t for item in value for t in _plain(item)]
    if isinstance(value, dict):
        return [", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, "", [], {}))]
    return [str(value)]


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(ts)))


# Optional status fields, printed when present and not empty: (key, label, lines of text). One line per field.
_STATUS_FIELDS: list[tuple[str, str, Callable[[Any], list[str]]]] = [
    ("storeState", "store state", _store_state_lines),
    ("watcher", "watcher", _watcher_lines),
    ("lastError", "last error", lambda e: [f"{e['at']} {e['error']}"]),
    ("degraded", "degraded", lambda items: [d["message"] for d in items]),
    ("fallback", "fallback", lambda f: [f"from {f['from']}: {f['reason']}"]),
    (
        "pendingEmbeddings",
        "pending",
        lambda n: [f"{n} chunk(s) waiting for embeddings (found by keywords meanwhile)"] if n else [],
    ),
    ("worker", "worker", lambda w: [f"pid {w['pid']} ({w['purpose']}) in the background"]),
    (
        "breaker",
        "breaker",
        lambda b: [] if b.get("state") == "closed" else [f"{b['state']} until {b['until']}: {b['reason']}"],
    ),
    ("warnings", "warning", lambda items: [str(w) for w in items]),
]


# -- entry point ---------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _merge_global_options(parser.parse_args(argv))
    as_json = getattr(args, "json", False)
    if getattr(args, "command_main", None) is not None:
        return int(args.command_main(args))
    try:
        if getattr(args, "check", None) is not None:
            args.check(args)
        if not getattr(args, "needs_memory", True):
            result, fmt = args.func(args, None)
        else:
            mem = Memory.open(agent=args.agent, config_path=args.config)
            try:
                result, fmt = args.func(args, mem)
            finally:
                mem.close()
    except (ConfigError, InvalidArgumentError) as exc:
        return _fail(exc, EXIT_USAGE, as_json)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, as_json)
    except KeyboardInterrupt:
        return _fail(MdMemoryError("interrupted"), EXIT_RUNTIME, as_json)
    try:
        if as_json:
            print(json.dumps(result, ensure_ascii=False, indent=2))
        elif result.get("error"):
            print(f"mdmemory: error: {display_text(str(result['error']))}", file=sys.stderr)
        else:  # text for a terminal: names and notes may hold escape sequences (JSON keeps them exact)
            print(display_text(fmt(result)))
        sys.stdout.flush()
    except BrokenPipeError:  # `mdmemory ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_RUNTIME if result.get("error") else EXIT_OK


def _merge_global_options(args: argparse.Namespace) -> argparse.Namespace:
    """Apply ``--config/--agent/--json`` given before the command; the command's own take precedence."""
    args.json = getattr(args, "json", False) or args.global_json
    if getattr(args, "config", None) is None:
        args.config = args.global_config
    if args.global_agent is not None:
        agent = getattr(args, "agent", None)
        if isinstance(agent, list):  # watch: --agent may repeat, so both places add up
            args.agent = [args.global_agent, *agent]
        elif agent is None:
            args.agent = args.global_agent
    return args


def _fail(exc: BaseException, code: int, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": str(exc)}, ensure_ascii=False))
    print(f"mdmemory: error: {display_text(str(exc))}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
