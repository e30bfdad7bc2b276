"""Helpers for the agent-integration tests.

``agent_config`` builds an AgentConfig from a real config file. ``run_cli`` runs ``mdmem`` with the
agent subcommands registered (cli.py wires ``cli_agent.register`` itself; until it does, this adds them).
``python -m tests.agent_helpers ARGS`` is that command line, for tests that spawn it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mdmem.cli import agent_commands as cli_agent
from mdmem.cli import commands as cli
from mdmem.config.load import AgentConfig, load_config

_build_parser = cli.build_parser


def write_config(path: Path, workspace: Path, defaults: dict[str, Any] | None = None, **root: Any) -> Path:
    """A config file with ``workspace``, provider ``hash`` and the given ``agents.defaults`` keys."""
    base = {"workspace": str(workspace), "memorySearch": {"provider": "hash"}}
    data = {"agents": {"defaults": {**base, **(defaults or {})}, **root}}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def agent_config(tmp_path: Path, workspace: Path, **defaults: Any) -> AgentConfig:
    """The default agent of a config whose ``agents.defaults`` holds ``defaults`` (camelCase keys)."""
    return load_config(write_config(tmp_path / "agent-config.json5", workspace, defaults)).agent()


def build_parser(*args: Any, **kwargs: Any) -> argparse.ArgumentParser:
    parser = _build_parser(*args, **kwargs)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "tools" not in sub.choices and kwargs.get("only") is None:
        cli_agent.register(sub, cli._common())
    return parser


def run_cli(argv: Sequence[str]) -> int:
    """``mdmem ARGV`` in this process; returns the exit code (output goes to the captured streams)."""
    original, cli.build_parser = cli.build_parser, build_parser
    try:
        return cli.main(list(argv))
    finally:
        cli.build_parser = original


if __name__ == "__main__":
    sys.exit(run_cli(sys.argv[1:]))
