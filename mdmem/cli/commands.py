"""Command line: ``mdmem index|search|get|status``. The only module that prints or sets exit codes.

Exit codes: 0 ok, 2 usage or configuration error, 1 runtime error. Every command takes ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from mdmem import __version__  # noqa: I001
from mdmem.cli import formatting as render
from mdmem.cli.agent_commands import register as register_agent_commands
from mdmem.cli.ckp_commands import register as register_ckp_commands
from mdmem.cli.lifecycle_commands import register as register_lifecycle_commands
from mdmem.cli.output import write
from mdmem.cli.parsers import EXIT_USAGE, OnlyOne, Parser, QuietParser, Refused
from mdmem.cli.service_commands import register as register_service_commands
from mdmem.cli.setup_commands import register as register_setup_commands
from mdmem.cli.store_commands import register as register_store_commands
from mdmem.cli.truth_commands import register as register_truth_commands
from mdmem.search.arguments import check_neighbors, check_search_arguments
from mdmem.util.display import display_name, display_text
from mdmem.util.errors import ConfigError, InvalidArgumentError, MdMemoryError

if TYPE_CHECKING:
    from mdmem.memory import Memory

EXIT_OK, EXIT_RUNTIME = 0, 1


def _common() -> Parser:
    common = Parser(add_help=False)
    common.add_argument("--config", help="config file (default: $MDMEMORY_CONFIG or ~/.mdmemory/config.json5)")
    common.add_argument("--agent", help="agent id from agents.list (default: the default agent)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    return common


def build_parser(parser_class: type[Parser] = Parser, only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``only``, one that knows just that command (see ``parse``)."""
    common = _common()
    parser = parser_class(prog="mdmem", description="Durable Markdown memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"mdmem {__version__}")
    # The global options are accepted before the command too (`mdmem --json status`). They get their own
    # dests: a subcommand's defaults would otherwise overwrite them; main() merges the two.
    parser.add_argument("--config", dest="global_config", metavar="CONFIG", help="config file, for any command")
    parser.add_argument("--agent", dest="global_agent", metavar="AGENT", help="agent id, for any command")
    parser.add_argument("--json", dest="global_json", action="store_true", help="print JSON, for any command")
    sub: Any = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)
    if only is not None:
        sub = OnlyOne(sub, only)

    p = sub.add_parser("index", parents=[common], help="index new and changed memory files")
    p.add_argument("--force", action="store_true", help="rebuild the whole index (implies --prune)")
    p.add_argument("--prune", action="store_true", help="drop indexed files whose folder is missing")
    p.add_argument(
        "--take-over",
        action="store_true",
        help="PostgreSQL: make this workspace the agent's in place of the one that indexed it (implies --force)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the detached worker (mdmem.engine.worker)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", parents=[common], help="search memory (memory_search)")
    p.add_argument("query")
    p.add_argument("--max-results", type=int, default=None, metavar="N")
    p.add_argument("--min-score", type=float, default=None, metavar="X")
    p.add_argument("--kind", choices=["main", "group"], default="main", help="session kind (citations auto)")
    p.add_argument("--neighbors", type=int, default=0, metavar="0|1", help="1: add the notes results link to/from")
    p.add_argument("--include-archive", action="store_true", help="also search memory/archive/ (archived files)")
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
    msub = model.add_subparsers(dest="model_command", required=True, parser_class=parser_class)
    p = msub.add_parser("pull", parents=[common], help="download a GGUF model ahead of time")
    p.add_argument("uri", nargs="?", help="hf:owner/repo/file.gguf (default: memorySearch.local.modelPath)")
    p.set_defaults(func=cmd_model_pull)
    p = msub.add_parser("convert", parents=[common], help="convert a sentence-transformers BERT folder to GGUF")
    p.add_argument("src", help="folder with config.json, vocab.txt, model.safetensors")
    p.add_argument("out", help="the .gguf file to write")
    p.add_argument("--type", dest="out_type", choices=["f32", "f16", "q8_0"], default="f16")
    p.set_defaults(func=cmd_model_convert, needs_memory=False)

    register_setup_commands(sub, common)
    register_agent_commands(sub, common)
    register_service_commands(sub, common, SocketCommands)
    register_store_commands(sub, common, parser_class)
    register_truth_commands(sub, common)
    register_lifecycle_commands(sub, common)
    register_ckp_commands(sub, common, parser_class)
    return parser


# -- commands ------------------------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    if args.worker:
        from mdmem.engine import worker

        return worker.run(mem.agent, mem.sync), render.format_index
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
        if args.take_over:
            report = mem.take_over(progress=progress)
        else:
            report = mem.sync(force=args.force, progress=progress, prune=args.prune)
    finally:
        if bar is not None:
            bar.close()
    return report, render.format_index


def check_search(args: argparse.Namespace) -> None:
    """The memory_search tool's bounds, checked before the config or the index is opened."""
    names = {"query": "QUERY", "maxResults": "--max-results", "minScore": "--min-score"}
    args.query, args.max_results, args.min_score = check_search_arguments(
        args.query, args.max_results, args.min_score, names
    )
    check_neighbors(args.neighbors, "--neighbors")


def cmd_search(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    mem.background = "worker"  # this process exits after answering: leftover indexing goes to a detached worker
    result = mem.search(
        args.query,
        max_results=args.max_results,
        min_score=args.min_score,
        session_kind=args.kind,
        neighbors=args.neighbors,
        include_archive=args.include_archive,
    )
    return result, render.format_search


def cmd_get(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    return mem.get(args.path, from_line=args.from_line, lines=args.lines), lambda r: r["text"]


def cmd_status(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    return mem.status(), render.format_status


def cmd_session_start(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    result = mem.session_start()

    def fmt(r: dict[str, Any]) -> str:
        head = render.format_index(r["sync"]) if r["sync"] else "sync on session start is off (sync.onSessionStart)"
        if r["status"].get("enabled") is False:
            head = "no sync: memory search is disabled (memorySearch.enabled is false)"
        return head + "\n" + render.format_status(r["status"])

    return result, fmt


def watch_main(args: argparse.Namespace) -> int:
    """Run the watch daemon until SIGINT/SIGTERM; every event is one JSON line on stdout."""
    import queue
    import signal

    from mdmem.util.threads import single_threaded_blas

    single_threaded_blas()  # before anything imports numpy
    from mdmem.runtime import watch_daemon as daemon
    from mdmem.runtime.ipc_server import load_pinned

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
        config, fingerprint = load_pinned(args.config)
        if fingerprint is None:
            emit({"event": "error", "error": "the config file kept changing while loading; no command-line socket"})
        daemon.run(
            config,
            args.agent,
            emit,
            stop,
            polling=True if args.polling else None,
            fingerprint=fingerprint,
            commands=SocketCommands(),
        )
    except ConfigError as exc:
        return _fail(exc, EXIT_USAGE, True)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, True)
    finally:
        lines.put(None)
        writer.join(10)
    return EXIT_OK


def cmd_model_pull(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    from mdmem.providers.factory import model_cache_dir
    from mdmem.providers.local import pull_model

    uri = args.uri or mem.settings.model or mem.settings.local.model_path
    cache = model_cache_dir(mem.settings, mem.agent.home)
    path, present = pull_model(uri, cache)
    result = {"uri": uri, "path": str(path), "bytes": path.stat().st_size, "alreadyPresent": present}
    return result, render.format_pull


def cmd_model_convert(
    args: argparse.Namespace, mem: Memory | None
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    from mdmem.providers.bert_to_gguf import convert_bert

    out = convert_bert(args.src, args.out, out_type=args.out_type)
    result = {"source": args.src, "path": str(out), "type": args.out_type, "bytes": out.stat().st_size}
    return result, lambda r: f"wrote {r['path']} ({r['type']}, {r['bytes']} bytes)"


# -- entry point ---------------------------------------------------------------------------------------
Outcome = tuple[int, str, str]  # exit code, what goes to stdout, what goes to stderr


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command in this process (mdmem.cli.entry asks a running daemon first)."""
    args = parse(argv)
    if getattr(args, "command_main", None) is not None:
        return int(args.command_main(args))
    try:
        outcome = execute(args, lambda: _open_memory(args))
    except KeyboardInterrupt:
        outcome = _failure(MdMemoryError("interrupted"), EXIT_RUNTIME, args.json)
    return _write(outcome)


def _open_memory(args: argparse.Namespace) -> Memory:
    from mdmem.memory import Memory  # here: `mdmem model convert` and usage errors need none of it

    return Memory.open(agent=args.agent, config_path=args.config)


def parse(argv: Sequence[str] | None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """The command line's arguments, ``--config/--agent/--json`` given before the command merged in.

    Without ``parser``: first with a quiet parser that knows only the command named in ``argv``, which
    accepts what the full one accepts for that command; anything it refuses (a usage error, ``--help``) is
    parsed again by the full parser, which prints and exits as it always did."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if parser is None:
        command = _command_named(argv)
        if command is None:
            parser = build_parser()
        else:
            try:
                return _merge_global_options(build_parser(QuietParser, only=command).parse_args(argv))
            except Refused:
                parser = build_parser()
    return _merge_global_options(parser.parse_args(argv))


class SocketCommands:
    """The command line as a daemon's socket server runs it (mdmem.runtime.ipc_server.CommandLine): one
    quiet parser, built once; arguments it refuses go back to the client, whose own parser reports them."""

    def __init__(self) -> None:
        self._parser = build_parser(QuietParser)
        self._lock = threading.Lock()  # argparse keeps no state between calls, but say so

    def parse(self, argv: list[str]) -> argparse.Namespace:
        from mdmem.runtime.ipc_protocol import Refused as Left

        try:
            with self._lock:
                return parse(argv, self._parser)
        except Refused as exc:
            raise Left(f"arguments the command line reports itself: {exc}") from None

    def execute(self, args: argparse.Namespace, memory: Callable[[], AbstractContextManager[Memory]]) -> Outcome:
        return execute(args, memory)


def _command_named(argv: Sequence[str]) -> str | None:
    """The command in ``argv`` after the global options, if it reads plainly (else None: the full parser)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--config", "--agent"):
            i += 2
        elif arg == "--json" or arg.startswith(("--config=", "--agent=")):
            i += 1
        else:
            return None if arg.startswith("-") else arg
    return None


def execute(args: argparse.Namespace, memory: Callable[[], AbstractContextManager[Memory]]) -> Outcome:
    """Run a parsed command on the ``Memory`` that ``memory()`` enters, and render what it prints.

    The same for a command run here and one a daemon answers (mdmem.runtime.ipc_server), so both print the same."""
    as_json = args.json
    try:
        if getattr(args, "check", None) is not None:
            args.check(args)
        if not getattr(args, "needs_memory", True):
            result, show = args.func(args, None)
        else:
            with memory() as mem:
                result, show = args.func(args, mem)
    except (ConfigError, InvalidArgumentError) as exc:
        return _failure(exc, EXIT_USAGE, as_json)
    except MdMemoryError as exc:
        return _failure(exc, EXIT_RUNTIME, as_json)
    code = EXIT_RUNTIME if result.get("error") else EXIT_OK
    if as_json:
        return code, json.dumps(result, ensure_ascii=False, indent=2) + "\n", ""
    if result.get("error"):
        return code, "", f"mdmem: error: {display_text(str(result['error']))}\n"
    # text for a terminal: names and notes may hold escape sequences (JSON keeps them exact)
    return code, display_text(show(result)) + "\n", ""


def _write(outcome: Outcome) -> int:
    return write(*outcome)


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


def _failure(exc: BaseException, code: int, as_json: bool) -> Outcome:
    out = json.dumps({"error": str(exc)}, ensure_ascii=False) + "\n" if as_json else ""
    return code, out, f"mdmem: error: {display_text(str(exc))}\n"


def _fail(exc: BaseException, code: int, as_json: bool) -> int:
    return _write(_failure(exc, code, as_json))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
