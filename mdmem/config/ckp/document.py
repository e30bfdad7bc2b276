"""Reading a CKP declaration file: YAML (or JSON, which YAML reads too) into plain dicts and lists, safely.

``yaml.safe_load``'s loader only (no Python objects), plus what it lets through: a key given twice in one
mapping (PyYAML keeps the last silently), aliases that expand to millions of values (a "billion laughs"
document) or refer to themselves, several documents in one file, nesting deeper than any declaration needs,
a file too large to be one. Each is refused with a ``ConfigError`` naming the line and how to fix it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mdmem.util.errors import ConfigError

MAX_BYTES = 1 << 20  # a Memory declaration is a few KB
MAX_VALUES = 100_000  # values in the document once its aliases are expanded
MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key ({[1]: x}); the schema check names it
                continue
            if first is not key_node:
                line = first.start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given on line {line}). Fix: keep only one of them",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def _check_size(node: yaml.Node, source: str) -> None:
    """Refuse a document whose aliases expand past ``MAX_VALUES`` values, refer to themselves, or nest past
    ``MAX_DEPTH``: counted on the node graph, each node once (the count stops at the limit)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node, depth: int) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        line = n.start_mark.line + 1
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"line {line}: nested deeper than {MAX_DEPTH} levels. Fix: flatten the document.", source=source
            )
        if id(n) in active:
            raise ConfigError(
                f"line {line}: a YAML alias refers to a value that holds it (a recursive structure). "
                "Fix: write the value out instead of the alias.",
                source=source,
            )
        active.add(id(n))
        total = 1
        if isinstance(n, yaml.SequenceNode):
            children: list[yaml.Node] = list(n.value)
        elif isinstance(n, yaml.MappingNode):
            children = [part for pair in n.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_VALUES:
                raise ConfigError(
                    f"line {line}: the document expands to more than {MAX_VALUES:,} values through its YAML "
                    "aliases. Fix: write the declaration out without aliases.",
                    source=source,
                )
        active.discard(id(n))
        sizes[id(n)] = total
        return total

    size(node, 0)


def parse_declaration(text: str, source: str) -> Any:
    """The YAML document in ``text`` as plain data; ``ConfigError`` naming ``source`` and the line otherwise."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()  # type: ignore[no-untyped-call]
        if node is None:
            raise ConfigError("the file holds no document. Fix: write the Memory declaration in it.", source=source)
        _check_size(node, source)
        return loader.construct_document(node)  # type: ignore[no-untyped-call]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        if "expected a single document" in str(exc.context):
            problem = "more than one YAML document (---). Fix: keep one Memory declaration per file"
        elif "Fix:" not in problem:
            problem += ". Fix: correct the YAML there (indentation, quotes, colons)"
        raise ConfigError(f"invalid YAML: {where}{problem}.", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML ({exc}). Fix: correct the YAML syntax.", source=source) from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def read_declaration(path: str | Path) -> Any:
    """The declaration in the file ``path`` (YAML or JSON) as plain data; ``ConfigError`` when it cannot be
    read or parsed, naming the file and what to fix."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the declaration ({exc.strerror}). Fix: check the path.", source=source
        ) from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(
            f"the file is larger than {MAX_BYTES // 1024} KiB: not a Memory declaration. "
            "Fix: give the declaration's file.",
            source=source,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"the file is not UTF-8 text (byte {exc.start}). Fix: save it as UTF-8.", source=source
        ) from None
    return parse_declaration(text, source)
