"""Imports point one way (shared/DESIGN.md), with no cycles, and the light commands stay light.

Read from the source with ``ast``, nothing imported: ``cli`` -> {proxy, serve, run, tui,
train, export} -> pool -> records. A module-level import and one inside a function both
count (a function-level import is a dependency all the same; it only runs later).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentworld"

# The layers, lowest first; an import may only point to a lower layer or stay in its unit
# (a subpackage, or one flat module). The records family is the bottom: the schema and
# the shared pieces it is made of. Flat modules every layer may share sit just above it.
LAYERS: dict[str, int] = {
    "records": 0,
    "record_schema": 0,
    "record_fast": 0,
    "raw_ids": 0,
    "errors": 0,
    "agentworld": 0,  # the package itself: its version
    "config": 1,
    "listen": 1,
    "literal": 1,
    "model_folder": 1,
    "templates": 1,
    "cli_options": 1,
    "group_advantage": 1,
    "curves": 1,
    "seeds": 1,
    "plural": 1,
    "server_url": 1,
    "pool": 2,
    "proxy": 3,
    "serve": 3,
    "run": 3,
    "tui": 3,
    "train": 3,
    "export": 3,
    "demo": 4,
    "cli": 5,
}
# Imports between the records family's members are one unit's own business.
_RECORDS_FAMILY = frozenset(u for u, layer in LAYERS.items() if layer == 0)

# Command packages that use one another, each with why; any other pair is an error.
PEER_IMPORTS: dict[tuple[str, str], str] = {
    ("run", "proxy"): "`aw run` starts an in-process proxy when no --proxy is given",
}

# Import cycles known and owned elsewhere: (the package it lies in, a module on it) -> why.
# The test fails on any other cycle, and when one of these is gone (drop it here then).
# None today (the proxy's through app.py and the pool's through Pool.open are gone).
KNOWN_CYCLES: dict[tuple[str, str], str] = {}

HEAVY = ("torch", "transformers", "vllm", "accelerate")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # an agentworld module, or a third-party top-level package
    module_level: bool
    type_checking: bool
    line: int


def _modules() -> dict[str, Path]:
    """Every module by name: the Python ones, and the C extensions (each built from the
    one ``.c`` file of its name; they import no agentworld module)."""
    mods = {}
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]:
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The agentworld module an import lands on (``from pkg import mod`` or a name in it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(module: str) -> Iterator[Import]:
    path = MODULES[module]
    if path.suffix == ".c":
        return
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node: ast.AST, module_level: bool, type_checking: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield _target(alias.name, module_level, type_checking, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    name = full if full in MODULES else base
                    yield _target(name, module_level, type_checking, child.lineno)
            else:
                inner = module_level and not isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                )
                guarded = type_checking or (isinstance(child, ast.If) and _is_type_checking(child))
                yield from walk(child, inner, guarded)

    def _target(name: str, module_level: bool, type_checking: bool, line: int) -> Import:
        top = name.split(".")[0]
        target = (_resolve(name) or name) if top == "agentworld" else top
        return Import(module, target, module_level, type_checking, line)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), True, False)


IMPORTS = [imp for module in sorted(MODULES) for imp in _imports_of(module)]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _edges(*, module_level_only: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if imp.type_checking or imp.target not in MODULES or imp.target == imp.importer:
            continue  # typing-only imports never run
        if imp.module_level or not module_level_only:
            edges.setdefault(imp.importer, set()).add(imp.target)
    return edges


def test_no_module_level_import_cycles() -> None:
    """What runs on import: a cycle here makes import order matter."""
    assert _cycles(_edges(module_level_only=True)) == []


def test_no_import_cycles_counting_function_level_imports_but_the_known_one() -> None:
    """A function-level import that closes a cycle hides it from the interpreter, not
    from a reader; only the cycles in KNOWN_CYCLES (owned elsewhere) may stand."""
    cycles = _cycles(_edges(module_level_only=False))
    unexplained = []
    used = set()
    for cycle in cycles:
        known = [
            key
            for key in KNOWN_CYCLES
            if key[1] in cycle and all(m == key[0] or m.startswith(key[0] + ".") for m in cycle)
        ]
        used.update(known)
        if not known:
            unexplained.append(sorted(cycle))
    assert unexplained == []
    assert used == set(KNOWN_CYCLES), f"gone, drop from KNOWN_CYCLES: {set(KNOWN_CYCLES) - used}"


def test_imports_follow_the_layering() -> None:
    wrong = []
    peers_used = set()
    for imp in IMPORTS:
        if imp.target not in MODULES:
            continue
        src, dst = _unit(imp.importer), _unit(imp.target)
        if src == dst or (src in _RECORDS_FAMILY and dst in _RECORDS_FAMILY):
            continue
        assert src in LAYERS and dst in LAYERS, f"place {src!r} or {dst!r} in LAYERS"
        if LAYERS[dst] < LAYERS[src]:
            continue
        if (src, dst) in PEER_IMPORTS:
            peers_used.add((src, dst))
            continue
        wrong.append(f"{imp.importer}:{imp.line} imports {imp.target}")
    assert wrong == []
    assert peers_used == set(PEER_IMPORTS), set(PEER_IMPORTS) - peers_used


def _closure(roots: set[str], *, module_level_from: frozenset[str]) -> set[str]:
    """Every module the roots import; function-level imports followed only out of the
    modules in ``module_level_from`` (what a command's function runs), module-level ones
    everywhere."""
    seen, todo = set(), list(roots)
    by_importer: dict[str, list[Import]] = {}
    for imp in IMPORTS:
        by_importer.setdefault(imp.importer, []).append(imp)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imp in by_importer.get(module, ()):
            if imp.type_checking or (not imp.module_level and module not in module_level_from):
                continue
            todo.append(imp.target) if imp.target in MODULES else seen.add(imp.target)
    return seen


def test_help_proxy_and_tui_paths_import_nothing_heavy() -> None:
    """`aw --help`, `aw proxy` and `aw tui` start in well under a second: their modules,
    and what their command functions and app factories import, never load torch and co.
    (tests/test_cli.py::test_help_imports_no_heavy_packages checks `aw --help` live.)"""
    entry_functions = frozenset(
        {"agentworld.proxy.command", "agentworld.proxy.app", "agentworld.tui.command"}
    )
    reached = _closure({"agentworld.cli", *entry_functions}, module_level_from=entry_functions)
    assert "agentworld.proxy.relay" in reached  # the handlers make_app imports
    assert "agentworld.tui.app" in reached
    assert sorted(m for m in reached if m.split(".")[0] in HEAVY) == []


def _is_command_module(module: str) -> bool:
    return module.rpartition(".")[2].endswith("command")


def test_no_command_module_imports_another_commands_module() -> None:
    """Shared options live in agentworld/cli_options.py; only `cli` gathers the commands."""
    wrong = [
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if _is_command_module(imp.importer)
        and _is_command_module(imp.target)
        and imp.importer != imp.target
    ]
    assert wrong == []
