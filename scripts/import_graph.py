#!/usr/bin/env python3
"""The import graph of the mdmem package, summarised: its floors, their sizes, the edges between them, cycles.

Read from the source alone (stdlib ``ast``; nothing is imported or run). Every import counts, at module level or
inside a function; imports under ``if TYPE_CHECKING:`` are counted apart (``--type-only`` includes them).

    python scripts/import_graph.py            # the summary
    python scripts/import_graph.py --check    # also exit 1 on a cycle, an extra root module, a module over 450 lines
    make graph                                # the same as the first

Floors are the subpackages of ``mdmem/`` (a root module is a floor of its own). Where ``pyproject.toml``
holds the import-linter layers contract (``[tool.importlinter]``), each edge is marked ``down`` or ``UP``
(against the layers) and ``|`` for two floors declared independent.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT_ALLOWED = {"mdmem", "mdmem.__main__", "mdmem.memory"}
MAX_LINES = 450


def modules(package: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module of the package, whether only under TYPE_CHECKING), one per import statement target."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def resolve(target: str) -> str | None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, True)
            for stmt in node.orelse:
                visit(stmt, type_only)
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        for target in targets:
            module = resolve(target)
            if module is not None and module != name:
                found.append((module, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return found


def floor(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def layer_order(pyproject: Path) -> tuple[dict[str, int], list[set[str]]]:
    """Rank of each floor in the import-linter layers contract (0 = top) and its independent groups."""
    if not pyproject.is_file():
        return {}, []
    config = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("importlinter", {})
    for contract in config.get("contracts", []):
        if contract.get("type") == "layers":
            rank: dict[str, int] = {}
            groups: list[set[str]] = []
            for i, layer in enumerate(contract.get("layers", [])):
                names = [n.strip() for n in layer.replace(":", "|").split("|")]
                for n in names:
                    rank[n] = i
                if "|" in layer:
                    groups.append(set(names))
            return rank, groups
    return {}, []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--check", action="store_true", help="exit 1 unless the shape holds")
    ap.add_argument("--type-only", action="store_true", help="count imports under TYPE_CHECKING too")
    args = ap.parse_args(argv)
    mods = modules(args.repo / "mdmem")
    sizes = {m: sum(1 for _ in p.open(encoding="utf-8")) for m, p in mods.items()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    floor_edges: dict[tuple[str, str], int] = defaultdict(int)
    for m, p in mods.items():
        for target, type_only in imports_of(m, p, mods):
            if type_only and not args.type_only:
                continue
            graph[m].add(target)
            a, b = floor(m), floor(target)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                floor_edges[(a, b)] += 1
    floors: dict[str, list[str]] = defaultdict(list)
    for m in mods:
        floors[floor(m)].append(m)
    rank, independent = layer_order(args.repo / "pyproject.toml")

    print(f"mdmem: {len(mods)} modules, {sum(sizes.values())} lines, {len(floors)} floors")
    print(f"\n{'floor':28} {'modules':>7} {'lines':>7}  largest")
    for f in sorted(floors, key=lambda f: (-rank.get(f, len(rank)), f)):
        members = floors[f]
        big = max(members, key=lambda m: sizes[m])
        print(f"{f:28} {len(members):7} {sum(sizes[m] for m in members):7}  {big.rpartition('.')[2]} ({sizes[big]})")

    print("\nedges between floors (imports):")
    up = 0
    for (a, b), n in sorted(floor_edges.items()):
        mark = ""
        if a in rank and b in rank:
            if any(a in g and b in g for g in independent):
                mark, up = "  | independent floors", up + 1
            elif rank[b] < rank[a]:
                mark, up = "  UP (against the layers)", up + 1
            elif rank[b] == rank[a]:
                mark = "  (same layer)"
        print(f"  {a} -> {b}: {n}{mark}")

    floor_graph: dict[str, set[str]] = defaultdict(set)
    for a, b in floor_edges:
        floor_graph[a].add(b)
    module_cycles, floor_cycles = cycles(graph), cycles(dict(floor_graph))
    root = sorted(m for m in mods if m.count(".") == 1 and mods[m].name != "__init__.py")
    extra = [m for m in root if m not in ROOT_ALLOWED]
    over = sorted((m for m in mods if sizes[m] > MAX_LINES), key=lambda m: -sizes[m])
    beyond = f" ({len(extra)} beyond __main__ and memory)" if extra else ""
    print(f"\nroot modules: {', '.join(r.rpartition('.')[2] for r in root)}{beyond}")
    for c in module_cycles:
        print(f"module cycle ({len(c)}): {' '.join(c)}")
    for c in floor_cycles:
        print(f"floor cycle ({len(c)}): {' '.join(c)}")
    print(
        f"cycles: {len(module_cycles)} between modules, {len(floor_cycles)} between floors; "
        f"edges against the layers: {up if rank else 'no layers contract in pyproject.toml'}; "
        f"modules over {MAX_LINES} lines: {len(over)}"
    )
    ok = not module_cycles and not floor_cycles and not extra and not over and not up
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
