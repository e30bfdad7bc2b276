"""Memory-service subcommands: ``serve``, ``describe``, ``backfill`` (see mdmem.service).

``register`` adds them to the ``mdmem`` parser. ``describe`` is an ordinary ``(args, mem)`` command;
``serve`` and ``backfill`` run on their own (``command_main``) and return an exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdmem.util.errors import ConfigError, InvalidArgumentError, MdMemoryError

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


def register(
    sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser, socket_commands: Callable[[], Any]
) -> None:
    """The service's commands; ``socket_commands()`` makes what answers the command-line socket
    (mdmem.cli.commands.SocketCommands: passed in, so this module does not import the one that imports it)."""
    p = sub.add_parser("serve", help="run the memory-plane HTTP service (recall/retain/forget)")
    p.add_argument("--config", help="config file (default: $MDMEMORY_CONFIG or ~/.mdmemory/config.json5)")
    p.add_argument(
        "--agent", action="append", default=[], help="serve only this agent; repeat for several (default: all)"
    )
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # accepted as every command does
    p.add_argument("--host", default=None, help="default: service.host (127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="default: service.port (8080)")
    p.add_argument(
        "--recall-workers",
        type=int,
        default=None,
        metavar="N",
        help="processes answering recalls (default: service.recallWorkers, one per core up to 4; 0: none)",
    )
    p.set_defaults(func=None, command_main=serve_main, socket_commands=socket_commands)

    p = sub.add_parser("describe", parents=[common], help="print the service descriptor (.claw-describe.json)")
    p.set_defaults(func=cmd_describe, needs_memory=False)

    p = sub.add_parser("backfill", parents=[common], help="replay the proxy's history.jsonl ledgers into memory")
    p.add_argument("ledgers", nargs="+", metavar="LEDGER", help="history.jsonl files (rotated ones are read too)")
    p.add_argument("--after", help="only entries after this RFC 3339 time")
    p.add_argument("--limit", type=int, help="at most this many entries")
    p.add_argument("--url", help="POST to a running service instead of writing locally")
    p.add_argument("--pod", help="the pod whose proxy wrote the ledgers (as cllama sends its metadata.json pod)")
    p.add_argument(
        "--token", help="bearer token for --url (default: $MEMORY_API_TOKEN, else the token the service generated)"
    )
    p.set_defaults(func=None, command_main=backfill_main)


def cmd_describe(args: argparse.Namespace, mem: Any) -> tuple[dict[str, Any], Any]:
    from mdmem.service.app import DESCRIPTOR

    return DESCRIPTOR, lambda r: json.dumps(r, indent=2)


def _fail(exc: BaseException, code: int) -> int:
    print(f"mdmem: error: {exc}", file=sys.stderr)
    return code


def serve_main(args: argparse.Namespace) -> int:
    from mdmem.util.threads import single_threaded_blas

    single_threaded_blas()  # before anything imports numpy
    from mdmem.runtime.ipc_server import load_pinned
    from mdmem.service.server import serve

    try:
        config, fingerprint = load_pinned(args.config)
        if args.recall_workers is not None and not 0 <= args.recall_workers <= 64:
            raise ConfigError(f"--recall-workers must be 0-64, got {args.recall_workers}")
        serve(
            config,
            args.host,
            args.port,
            fingerprint=fingerprint,
            commands=args.socket_commands(),
            recall_workers=args.recall_workers,
            only=list(dict.fromkeys(args.agent)),
        )
    except ConfigError as exc:
        return _fail(exc, EXIT_USAGE)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME)
    except OSError as exc:  # the port is taken, the address is not ours
        return _fail(MdMemoryError(f"cannot listen: {exc}. Fix: choose another --port or --host"), EXIT_RUNTIME)
    return EXIT_OK


def backfill_main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mdmem.config.load import load_config, with_sessions
    from mdmem.files.sessionlog import SessionLog
    from mdmem.service import backfill as bf
    from mdmem.service.agents import Agents
    from mdmem.service.auth import TOKEN_ENV, stored_token
    from mdmem.service.contract import check_pod

    try:
        if args.limit is not None and args.limit < 1:
            raise InvalidArgumentError("--limit: expected a positive number of entries")
        after = bf.parse_time(args.after) if args.after else None
        check_pod(args.pod, "--pod")
        paths = [Path(p) for p in args.ledgers]
        if args.url:
            token = args.token or os.environ.get(TOKEN_ENV) or stored_token(load_config(args.config).home)
            retain = bf.http_retain(args.url, token, pod=args.pod)
        else:
            agents = Agents(load_config(args.config))
            logs: dict[str, SessionLog] = {}

            def retain(agent_id: str, entry: dict[str, Any]) -> str:
                if agent_id not in logs:  # the agent that answers agent_id from --pod (mdmem.service.pods)
                    logs[agent_id] = SessionLog(with_sessions(agents.config_of(agents.pods.key(agent_id, args.pod))))
                return logs[agent_id].retain(entry)[0]

        files = bf.ledger_files(paths) if all(p.is_file() for p in paths) else []
        bar = tqdm(total=bf.count_lines(files), unit="line", file=sys.stderr, disable=None, leave=False)
        try:
            summary = bf.backfill(paths, retain, agent=args.agent, after=after, limit=args.limit, progress=bar.update)
        finally:
            bar.close()
    except (ConfigError, InvalidArgumentError) as exc:
        return _fail(exc, EXIT_USAGE)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME)
    for line in summary.invalid:
        print(f"mdmem: skipped malformed ledger line {line}", file=sys.stderr)
    print(json.dumps(summary.to_dict()))
    return EXIT_OK
