"""Set-up subcommands: ``init``. ``register`` adds them to the ``mdmem`` parser; like every command in
``cli.py`` each handler takes ``(args, mem)`` and returns ``(result, formatter)``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

Result = tuple[dict[str, Any], Callable[[dict[str, Any]], str]]


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add the set-up subcommands to ``sub``; ``common`` holds ``--config``, ``--agent`` and ``--json``."""
    p = sub.add_parser(
        "init",
        parents=[common],
        help="start a memory workspace (MEMORY.md, memory/, today's log, AGENTS.md) and a config for it",
        description="Write a memory workspace in DIR (default: the current folder) and a commented config "
        "pointing at it ($MDMEMORY_HOME/config.json5, or --config). Never overwrites a file.",
    )
    p.add_argument("dir", nargs="?", default=None, metavar="DIR", help="the workspace folder (default: .)")
    p.add_argument("--model", metavar="GGUF", help="a local embedding model file (or hf: URI) to configure")
    p.set_defaults(func=cmd_init, needs_memory=False)


def cmd_init(args: argparse.Namespace, mem: None) -> Result:
    from mdmem.agent.init_workspace import format_initialised, init_workspace

    done = init_workspace(args.dir, config_path=args.config, env=os.environ, model=args.model)
    return done.to_dict(), format_initialised
