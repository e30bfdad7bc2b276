"""``mdmem ckp import FILE.yaml`` and ``mdmem ckp export``: the CKP 0.3.0 ``kind: Memory`` declaration, into an
mdmem config and out of one (mdmem.config.ckp; docs/ckp.md).

``import`` prints the config on stdout and what each field became on stderr (``--json``: one JSON object on
stdout), or writes it to ``--output`` (a new file, written whole or not at all; ``--force`` replaces one).
``export`` prints the declaration (YAML; ``--json``: JSON) on stdout and what it cannot carry on stderr. Both run
on their own (``command_main``): they print on both streams. Exit codes as every command: 2 for an invalid
declaration or argument, 1 for a failure to write, or, with ``--strict``, for a field mdmem cannot honour.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from mdmem.cli.output import write
from mdmem.util.display import display_text
from mdmem.util.errors import ConfigError, InvalidArgumentError, MdMemoryError

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser, parser_class: type) -> None:
    ckp = sub.add_parser("ckp", help="CKP kind: Memory declarations: import one as config, export this one")
    csub = ckp.add_subparsers(dest="ckp_command", required=True, parser_class=parser_class)
    p = csub.add_parser(
        "import",
        help="turn a CKP 0.3.0 kind: Memory declaration into mdmem config",
        description="Print the mdmem config for a CKP 0.3.0 kind: Memory declaration (stdout) and, for each of its "
        "fields, whether it was mapped, defaulted, unsupported or ignored (stderr). Nothing is written "
        "without --output.",
    )
    p.add_argument("file", metavar="FILE.yaml", help="the declaration (YAML or JSON)")
    p.add_argument("--output", "-o", metavar="PATH", help="write the config to this new file instead of printing it")
    p.add_argument("--force", action="store_true", help="with --output: replace the file if it exists")
    p.add_argument(
        "--agent", default="main", help="the agent id the declaration is for, {identity_name} (default: main)"
    )
    p.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE", help="a path template's value, e.g. tenant_id=acme"
    )
    p.add_argument("--strict", action="store_true", help="fail (exit 1, nothing written) when a field is unsupported")
    p.add_argument("--json", action="store_true", help="print config and report as one JSON object")
    p.set_defaults(func=None, command_main=import_main)
    p = csub.add_parser(
        "export", parents=[common], help="print the kind: Memory declaration of an agent's config (YAML)"
    )
    p.set_defaults(func=None, command_main=export_main)


def _fail(exc: BaseException, code: int, as_json: bool) -> int:
    out = json.dumps({"error": str(exc)}, ensure_ascii=False) + "\n" if as_json else ""
    return write(code, out, f"mdmem: error: {display_text(str(exc))}\n")


def _variables(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise InvalidArgumentError(f"--var {pair!r}: expected NAME=VALUE, e.g. --var tenant_id=acme")
        out[name] = value
    return out


def _field_line(f: Any) -> str:
    from mdmem.config.validation import show

    line = f"  {f.status:<12} {f.path}"
    if f.value is not None:
        line += f" {show(f.value)}"
    if f.key is not None:
        line += f" -> {f.key}" + (f" = {show(f.set)}" if f.set is not None else "")
    return line + (f" ({f.note})" if f.note else "")


def import_main(args: argparse.Namespace) -> int:
    from mdmem.config.ckp.document import read_declaration
    from mdmem.config.ckp.fields import MS, counts
    from mdmem.config.ckp.to_config import to_config
    from mdmem.config.settings import MemorySearchConfig
    from mdmem.config.validation import Loader

    try:
        doc = read_declaration(args.file)
        done = to_config(doc, args.agent, _variables(args.var), os.path.dirname(os.path.abspath(args.file)), args.file)
        ms = done.config["agents"].get("defaults", {}).get("memorySearch", {})
        Loader(None).section(MemorySearchConfig, ms, MS)  # what mdmem's loader will say of it, now
        tally = counts(done.fields)
        unsupported = [f.path for f in done.fields if f.status == "unsupported"]
        if args.strict and unsupported:
            raise MdMemoryError(
                f"--strict: {len(unsupported)} field(s) unsupported, nothing written: {', '.join(unsupported)}"
            )
        text = json.dumps(done.config, ensure_ascii=False, indent=2) + "\n"
        written = _write_config(args.output, text, args.force) if args.output else None
    except (ConfigError, InvalidArgumentError) as exc:
        return _fail(exc, EXIT_USAGE, args.json)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, args.json)
    if args.json:
        result = {
            "name": done.name,
            "agent": done.agent,
            "config": done.config,
            "fields": [f.to_dict() for f in done.fields],
            "counts": tally,
            "written": written,
        }
        return write(EXIT_OK, json.dumps(result, ensure_ascii=False, indent=2) + "\n", "")
    report = [f'ckp import: Memory "{done.name}" (CKP 0.3.0) for agent {done.agent}']
    report += [_field_line(f) for f in done.fields]
    report.append(", ".join(f"{n} {status}" for status, n in tally.items()))
    if written:
        report.append(f"wrote {written}")
    return write(EXIT_OK, "" if written else text, display_text("\n".join(report)) + "\n")


def _write_config(output: str, text: str, force: bool) -> str:
    """Write ``text`` to ``output`` whole or not at all; refuse an existing file unless ``force``."""
    from mdmem.util.filewrite import Folder

    path = Path(os.path.abspath(output))
    try:
        with Folder(path.parent, ()) as folder:
            if force:
                folder.replace(path.name, text.encode())
            else:
                folder.create(path.name, text.encode())
    except FileExistsError:
        raise InvalidArgumentError(
            f"{path} exists already; nothing was written. Fix: choose another --output, or add --force to replace it"
        ) from None
    except FileNotFoundError:
        raise InvalidArgumentError(f"--output: the folder {path.parent} does not exist. Fix: create it first") from None
    except OSError as exc:
        raise MdMemoryError(f"cannot write {path}: {exc.strerror or exc}; nothing was written") from None
    return str(path)


def _index_identity(agent: Any) -> tuple[dict[str, Any] | None, str | None]:
    """What the agent's SQLite index records of its embedding (provider, model, dims), if it has one."""
    if agent.memory_search.store.backend != "sqlite":
        return None, None
    if not agent.store_path.exists():
        return None, None
    from mdmem.store.open import open_store
    from mdmem.util.redaction.credentials import scrub

    try:
        store = open_store(agent)
        try:
            return store.get_meta("identity"), None
        finally:
            store.close()
    except (MdMemoryError, OSError) as exc:
        return None, f"the index was not read ({scrub(str(exc))})"


def export_main(args: argparse.Namespace) -> int:
    import yaml

    from mdmem.config.ckp.from_config import to_declaration
    from mdmem.config.load import load_config

    try:
        agent = load_config(args.config).agent(args.agent)
        identity, problem = _index_identity(agent)
        done = to_declaration(agent, identity)
    except ConfigError as exc:
        return _fail(exc, EXIT_USAGE, args.json)
    except MdMemoryError as exc:
        return _fail(exc, EXIT_RUNTIME, args.json)
    notes = done.notes + ([problem] if problem else [])
    if args.json:
        result = {"declaration": done.declaration, "notCarried": done.not_carried, "notes": notes}
        return write(EXIT_OK, json.dumps(result, ensure_ascii=False, indent=2) + "\n", "")
    out = yaml.safe_dump(done.declaration, sort_keys=False, allow_unicode=True, default_flow_style=False)
    err = [f"note: {n}" for n in notes]
    if done.not_carried:
        err.append("not carried by CKP (import gives mdmem's default): " + ", ".join(done.not_carried))
    return write(EXIT_OK, out, display_text("\n".join(err)) + "\n" if err else "")
