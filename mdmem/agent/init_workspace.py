"""``mdmem init [DIR]``: a new memory workspace and a commented config pointing at it.

Like ``git init`` and ``uv init``, DIR defaults to the current folder. The workspace gets ``MEMORY.md``,
``memory/`` with today's log, and ``AGENTS.md`` (how an agent should use its memory: the text of
``workspace-template/AGENTS.md``); the config goes where every command looks for it (``--config``,
``$MDMEMORY_CONFIG``, else ``$MDMEMORY_HOME/config.json5``, default ``~/.mdmemory/config.json5``).

Nothing is ever overwritten: every file is checked first and created exclusively (``O_EXCL``), and an
existing one stops the whole command before anything is written, naming the file and the fix.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from mdmem.config import paths as configpath
from mdmem.files.clock import DAILY_DIR
from mdmem.util.errors import InvalidArgumentError, MdMemoryError
from mdmem.util.filewrite import write_all

MEMORY_MD = """# Long-term memory

Curated facts that stay true: decisions, preferences, people, how things are set up.
Update entries in place rather than appending duplicates; the day-to-day goes in memory/YYYY-MM-DD.md.

## People

## Preferences

## Projects

## Decisions
"""

AGENTS_MD = """# AGENTS.md — how this workspace remembers

You wake up fresh every session. These files are your memory: read them, keep them current.

## Memory

Your memory lives in plain Markdown in this workspace and is searchable with `memory_search`
(results cite `path` and `startLine`-`endLine`; use `memory_get` to read more lines around a hit).

**What to write where**

- **`MEMORY.md`** — curated long-term memory. Decisions, preferences, durable facts about people,
  projects and how things are set up. Keep it tidy: update entries instead of appending duplicates.
  Only loaded in the main private session, never in group chats.
- **`memory/YYYY-MM-DD.md`** — today's running log. Append what happened, what you learned, open
  threads, things to follow up. One file per day; never rewrite old days.
- **"Remember this"** — when someone asks you to remember something, write it down *now* (today's
  log, or `MEMORY.md` if it is a lasting fact or preference). Do not keep it only in the conversation:
  the context will be compacted and "mental notes" are lost.

**When to search**

Before answering anything about earlier work, decisions, dates, people, preferences or todos, run
`memory_search` first, then `memory_get` the lines you need. Say so when memory has nothing.

**Before compaction**

When the runtime asks you to store durable memories before compaction, write lasting notes to
today's log (or `MEMORY.md`) and reply `NO_REPLY` if there is nothing to store.
"""

CONFIG = """// mdmem configuration, written by `mdmem init` on {today}.
// Every key is optional; docs/configuration.md and config.example.json5 describe them all.
// Environment overrides: MDMEMORY_HOME (state, default ~/.mdmemory), MDMEMORY_CONFIG, MDMEMORY_WORKSPACE.
{{
  agents: {{
    defaults: {{
      // The workspace: MEMORY.md and memory/YYYY-MM-DD.md under this folder are memory.
      workspace: {workspace},
      memorySearch: {{
        // Embedding provider: "auto" (the local model when its file is on disk, else OpenAI when
        // OPENAI_API_KEY is set, else keyword-only search), "local", "openai" or "none" (keywords only).
        provider: {provider},
        local: {{
          // A GGUF embedding model: a file path, or hf:<owner>/<repo>/<file> (`mdmem model pull` fetches it).
          // {model_note}
          modelPath: {model},
        }},
      }},
    }},
  }},
}}
"""


@dataclass(frozen=True)
class Initialised:
    """What ``init`` wrote, and the commands to run next."""

    workspace: Path
    config: Path
    written: list[Path]
    next_commands: list[str]

    def to_dict(self) -> dict[str, object]:
        return {
            "workspace": str(self.workspace),
            "config": str(self.config),
            "written": [str(p) for p in self.written],
            "next": self.next_commands,
        }


def init_workspace(
    folder: str | None,
    *,
    config_path: str | None,
    env: Mapping[str, str],
    model: str | None = None,
    today: date | None = None,
) -> Initialised:
    """Write a workspace in ``folder`` (default: the current folder) and a config pointing at it.

    ``config_path`` is ``--config``; ``model`` a GGUF file or ``hf:`` URI for ``local.modelPath`` (then the
    provider is ``local``; else ``auto`` with the default model). Raises ``InvalidArgumentError`` naming
    the first file that exists already (nothing is written then)."""
    from mdmem.config.settings import DEFAULT_LOCAL_MODEL

    cwd = os.getcwd()
    workspace = Path(configpath.absolute(folder or ".", cwd, env))
    home = configpath.home_dir(env)
    explicit = config_path or env.get("MDMEMORY_CONFIG")
    config = Path(configpath.absolute(explicit, cwd, env) if explicit else os.path.join(home, "config.json5"))
    if model is not None and not model.startswith("hf:"):
        local = Path(configpath.absolute(model, cwd, env))
        if not local.is_file():
            raise InvalidArgumentError(
                f"--model {model}: no such file. Fix: give the path of a .gguf embedding model, or an "
                "hf:owner/repo/file.gguf URI (`mdmem model pull` downloads it later)"
            )
        model = str(local)
    day = today or date.today()
    log = workspace / DAILY_DIR / f"{day.isoformat()}.md"
    files = {
        workspace / "MEMORY.md": MEMORY_MD,
        workspace / "AGENTS.md": AGENTS_MD,
        log: f"# {day.isoformat()}\n\n",
        config: CONFIG.format(
            today=day.isoformat(),
            workspace=json.dumps(str(workspace), ensure_ascii=False),
            provider=json.dumps("local" if model else "auto"),
            model=json.dumps(model or DEFAULT_LOCAL_MODEL, ensure_ascii=False),
            model_note="Given to `mdmem init --model`."
            if model
            else "The default model; `mdmem model pull` downloads it.",
        ),
    }
    for path in files:
        if path.exists() or path.is_symlink():
            what = "config" if path == config else "workspace file"
            fix = (
                "pass --config NEW.json5 to write the config elsewhere, or edit agents.defaults.workspace in it"
                if path == config
                else "choose another DIR, or keep the files you have (mdmem indexes them as they are)"
            )
            raise InvalidArgumentError(f"{what} {path} exists already; init never overwrites. Fix: {fix}")
    for path in (workspace, config.parent):
        if path.exists() and not path.is_dir():
            raise InvalidArgumentError(f"{path} is not a folder. Fix: choose another DIR or --config")
    written: list[Path] = []
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            _create(path, text)
            written.append(path)
    except OSError as exc:
        for path in written:  # all or nothing: a half-made workspace would be refused by the next try
            path.unlink(missing_ok=True)
        if isinstance(exc, FileExistsError):
            raise InvalidArgumentError(f"{exc.filename} appeared while init ran; nothing was written") from exc
        raise MdMemoryError(f"cannot write {exc.filename or workspace}: {exc.strerror or exc}") from exc
    flag = f" --config {shlex.quote(str(config))}" if config_path else ""  # else every command finds it
    steps = [] if model else [f"mdmem model pull{flag}"]
    steps += [f"mdmem index{flag}", f'mdmem search{flag} "what did we decide"']
    if model:
        steps.append(f"mdmem watch{flag}")
    return Initialised(workspace, config, written, steps)


def _create(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def format_initialised(result: dict[str, list[str]]) -> str:
    """The text ``mdmem init`` prints: the files written, then the next commands."""
    return "\n".join([f"wrote {p}" for p in result["written"]] + ["", "next:"] + [f"  {c}" for c in result["next"]])
