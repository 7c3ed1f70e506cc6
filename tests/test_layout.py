"""The package's layout: no import circle, no oversized module, no native code.

The import graph is read from the source with ``ast``: every ``import`` and
``from ... import`` of the package (relative or absolute, at module level, in a
function, or under ``TYPE_CHECKING``) is an edge from the importing module to
the module it names. A circle of such edges means two modules each need the
other to be understood (and, at run time, one of them is half-initialized
while the other imports it).
"""

from __future__ import annotations

import ast
import pathlib

import langgraph_durable

PKG = pathlib.Path(langgraph_durable.__file__).parent
ROOT = "langgraph_durable"
#: A module past this many lines is to be split by concern (see docs/architecture.md).
MAX_LINES = 800
#: Tables of data, not logic: allowed past ``MAX_LINES``.
DATA_TABLES: set[str] = set()
#: Files that mean native code in what is a pure-Python package.
NATIVE_SUFFIXES = {".c", ".h", ".so", ".pyx", ".pxd", ".pyd"}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PKG).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((ROOT, *parts))


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _known(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The module ``name`` is, or the package module an attribute of it lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(module: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # ``from pkg import name``: the submodule when one is so called, else pkg
            names = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == ROOT or name.startswith(ROOT + "."):
                target = _known(name, modules)
                if target is not None and target != module:
                    found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _edges(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), each closed (a, b, a)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle(graph, set(group)) for group in groups]


def _circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest closed path through the group's first module, within the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, set()) & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")


def test_the_graph_sees_every_kind_of_import(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from . import sibling, CONSTANT\n"
        "from .._core.codec import ThreadKey\n"
        "import langgraph_durable.errors\n"
        "if TYPE_CHECKING:\n"
        "    from ..protect import keys\n"
        "def later():\n"
        "    from langgraph_durable.other.deep import name\n",
        encoding="utf-8",
    )
    names = [
        "langgraph_durable",
        "langgraph_durable._core",
        "langgraph_durable._core.codec",
        "langgraph_durable.errors",
        "langgraph_durable.other",
        "langgraph_durable.other.deep",
        "langgraph_durable.pkg",
        "langgraph_durable.pkg.mod",
        "langgraph_durable.pkg.sibling",
        "langgraph_durable.protect",
        "langgraph_durable.protect.keys",
    ]
    modules = dict.fromkeys(names, tmp_path)
    assert _edges("langgraph_durable.pkg.mod", source, modules) == {
        "langgraph_durable.pkg.sibling",  # ``from . import`` of a submodule
        "langgraph_durable.pkg",  # ``from . import`` of a name: the package
        "langgraph_durable._core.codec",  # relative, two levels up
        "langgraph_durable.errors",  # absolute
        "langgraph_durable.protect.keys",  # under TYPE_CHECKING
        "langgraph_durable.other.deep",  # inside a function
    }
    graph = import_graph()
    assert "langgraph_durable.postgres._writes" in graph["langgraph_durable.postgres._ops"]
    assert "langgraph_durable.protect.integrity" in graph["langgraph_durable._saver_base"]


def test_find_cycles_names_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e2", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package() -> None:
    circles = find_cycles(import_graph())
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_no_module_is_over_the_line_limit() -> None:
    sizes = {
        str(p.relative_to(PKG)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(PKG.rglob("*.py"))
    }
    over = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in DATA_TABLES}
    assert over == {}, f"split these by concern (at most {MAX_LINES} lines each): {over}"
    # an allowed table that shrank below the limit leaves the list
    assert {name for name in DATA_TABLES if sizes.get(name, 0) > MAX_LINES} == DATA_TABLES


def test_no_native_code_in_the_package() -> None:
    native = sorted(
        str(p.relative_to(PKG))
        for p in PKG.rglob("*")
        if p.is_file() and any(p.name.endswith(s) for s in NATIVE_SUFFIXES)
    )
    assert native == []
