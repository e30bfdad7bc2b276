"""The command line's argument parsers: the one that prints and exits as argparse does (with a hint), the
quiet one a daemon uses (it never prints nor exits: ``Refused``), and the subparsers that build only the
command asked for (building ~25 argparse parsers costs ~6 ms a call)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from mdmem.cli import suggest

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors that point to the command's own help and name the closest known words."""

    def error(self, message: str) -> NoReturn:  # argparse exits 2 on usage errors; keep that, add a hint
        self.print_usage(sys.stderr)
        print(f"mdmem: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def _check_value(self, action: argparse.Action, value: Any) -> None:  # argparse's hook for choices
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, suggest.invalid_choice(value, action.choices))

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """An argument this parser does not know is its error (its usage, its help, the closest option), not
        left for the top level, which would point to `mdmem --help`. Nothing is left over, ever."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            options = (s for a in self._actions if a.help != argparse.SUPPRESS for s in a.option_strings)
            self.error(suggest.unrecognized(extras, options))
        return parsed, extras


class Refused(Exception):
    """Raised by ``QuietParser`` where argparse would print (usage, an error, help, the version) and exit."""


class QuietParser(Parser):
    """The command line's parser that never prints nor exits: ``parse`` tries it on a parser holding only the
    command given (a daemon has no terminal at all), then lets the full parser say what is wrong."""

    def _print_message(self, message: str, file: Any = None) -> None:
        pass

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise Refused(message or f"exit {status}")

    def error(self, message: str) -> NoReturn:
        raise Refused(message)


class Discard:
    """What ``build_parser(only=...)`` registers instead of the parsers of the other commands: nothing."""

    def __getattr__(self, name: str) -> Callable[..., Discard]:
        return lambda *args, **kwargs: self


class OnlyOne:
    """Subparsers that keep only ``command``'s parser (building ~25 argparse parsers costs ~6 ms a call)."""

    def __init__(self, sub: Any, command: str) -> None:
        self.sub, self.command = sub, command

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        return self.sub.add_parser(name, **kwargs) if name == self.command else Discard()
