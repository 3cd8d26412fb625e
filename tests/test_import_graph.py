"""No import cycles among the modules of extsrc and augment_ops.

Every import counts: at the top of a module, inside a function (a lazy import), under
``if TYPE_CHECKING:``, relative ones, ``from pkg import submodule``, and
``importlib.import_module("a.constant.name")``. A lazy or type-only import avoids an import
error, but the two modules still cannot be understood, tested or moved apart, so it is a cycle
all the same.

Two kinds of edge are left out because the import system makes them by itself: a package's
``__init__`` importing its own submodules (a facade, as ``extsrc/__init__.py`` re-exports the
public names), and a module importing a package it lives in (the package is always imported
first).

A failure lists every cycle as its path of modules, each step with the file and line of the
import that makes it.
"""

from __future__ import annotations

import ast
import os
from collections import deque
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("extsrc", "augment_ops")

Edges = dict[str, dict[str, list[str]]]  # module -> imported module -> ["file:line", ...]


def find_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """``{dotted name: file}`` of every ``.py`` file under the ``packages`` folders of ``root``
    (a package is named by its ``__init__.py``)."""
    mods: dict[str, Path] = {}
    for pkg in packages:
        for dirpath, dirnames, files in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = Path(dirpath) / f
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                mods[".".join(parts)] = path
    return mods


def _known(name: str, mods: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``mods`` (``a.b.func`` -> ``a.b``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, module: str, is_pkg: bool, mods: dict[str, Path]) -> list[str]:
    """The modules of ``mods`` that one import statement or ``import_module`` call imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = module.split(".") if is_pkg else module.split(".")[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg.
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        names = [node.args[0].value]
    else:
        return []
    return [t for t in (_known(n, mods) for n in names) if t is not None]


def import_edges(root: Path, packages: tuple[str, ...]) -> Edges:
    """Every import between the modules of ``packages``, with where it is written."""
    mods = find_modules(root, packages)
    edges: Edges = {m: {} for m in mods}
    for module, path in mods.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            for target in _targets(node, module, is_pkg, mods):
                if target == module:
                    continue
                if is_pkg and target.startswith(module + "."):
                    continue  # a package's __init__ importing its own submodules
                if module.startswith(target + ".") and mods[target].name == "__init__.py":
                    continue  # a module importing a package it lives in
                where = f"{path.relative_to(root)}:{node.lineno}"  # type: ignore[attr-defined]
                edges[module].setdefault(target, []).append(where)
    for targets in edges.values():  # ast.walk is breadth first: list the lines in file order
        for where_list in targets.values():
            where_list.sort(key=lambda w: (w.rpartition(":")[0], int(w.rpartition(":")[2])))
    return edges


def _components(edges: Edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def _shortest_cycle(start: str, members: set[str], edges: Edges) -> list[str]:
    """The shortest path ``start -> ... -> start`` inside one component (breadth first)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in a component but on no cycle")


def find_cycles(edges: Edges) -> list[str]:
    """Every cycle, worded: ``a -> b (a.py:3) -> a (b.py:7, lazy ones too)``. For each module of
    each component, the shortest cycle through it, each cycle once."""
    lines: list[str] = []
    for comp in _components(edges):
        members = set(comp)
        seen: set[tuple[str, ...]] = set()
        for start in comp:
            path = _shortest_cycle(start, members, edges)
            ring = path[:-1]
            first = ring.index(min(ring))
            key = tuple(ring[first:] + ring[:first])
            if key in seen:
                continue
            seen.add(key)
            steps = [key[0]] + [
                f"-> {b} ({', '.join(edges[a][b])})"
                for a, b in zip(key, (*key[1:], key[0]), strict=True)
            ]
            lines.append(" ".join(steps))
    return lines


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_edges(REPO, PACKAGES))
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(cycles)


def test_the_graph_sees_every_module_and_the_package_layout() -> None:
    # The check reads the tree as it is: the subpackages are there, and their modules import.
    edges = import_edges(REPO, PACKAGES)
    assert {"extsrc.sources.table", "extsrc.sources.manifest", "extsrc.validation.report",
            "extsrc._util.argcheck"} <= set(edges)
    assert "extsrc.sources.manifest" in edges["extsrc.sources.table"]
    assert "extsrc.sources.folders" in edges["extsrc.sources.manifest"]


#: The layers from the bottom up (README "How the code is laid out"): a module imports modules
#: of its own layer and lower ones only. augment_ops, the op registry and tracer, is below all
#: of extsrc; ``extsrc`` itself is the public face (the facade, ``__main__``, the old paths).
LAYERS = ("augment_ops", "extsrc.errors", "extsrc._util", "extsrc._dali", "extsrc.sources",
          "extsrc.ops_runtime", "extsrc.graph", "extsrc.validation", "extsrc.loading",
          "extsrc.tools", "extsrc")
#: Imports up the layers by design: the graph builders take the loader's config whole
#: (``build_pipeline(source, config, ...)``), so they read its type and the output names.
UP_BY_DESIGN = {("extsrc.graph.image", "extsrc.loading.config"),
                ("extsrc.graph.video", "extsrc.loading.config")}


def up_imports(edges: Edges, layers: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``(module, imported module, where)`` of every import of a higher layer's module; a
    module's layer is the longest of ``layers`` that it is or lies in."""
    def layer(module: str) -> int:
        found = [i for i, name in enumerate(layers)
                 if module == name or module.startswith(name + ".")]
        return max(found, key=lambda i: len(layers[i])) if found else -1

    return [(a, b, ", ".join(where)) for a, targets in sorted(edges.items())
            for b, where in sorted(targets.items()) if layer(b) > layer(a)]


def test_imports_go_down_the_layers() -> None:
    up = [u for u in up_imports(import_edges(REPO, PACKAGES), LAYERS)
          if u[:2] not in UP_BY_DESIGN]
    assert not up, "imports up the layers:\n" + "\n".join(f"{a} -> {b} ({w})" for a, b, w in up)


# -- the check itself, on a small package written for it --------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_lazy_cycle_is_found_with_the_lines_of_both_imports(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg import a, b  # a facade: not a cycle\n",
        "pkg/a.py": "import os\n\n\ndef f():\n    from pkg.b import g  # lazy\n    return g\n",
        "pkg/b.py": "from pkg.a import f\n\n\ndef g():\n    return f\n",
    })
    cycles = find_cycles(import_edges(tmp_path, ("pkg",)))
    a, b = os.path.join("pkg", "a.py"), os.path.join("pkg", "b.py")
    assert cycles == [f"pkg.a -> pkg.b ({a}:5) -> pkg.a ({b}:1)"]


def test_type_checking_relative_and_submodule_imports_count(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": (
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from .. import d\n"
        ),
        "pkg/d.py": "from pkg.sub import e\n",
        "pkg/sub/e.py": "import importlib\n\nimportlib.import_module('pkg.sub.c')\n",
        "pkg/ok.py": "from pkg import d  # one way only\n",
    })
    cycles = find_cycles(import_edges(tmp_path, ("pkg",)))
    c, d, e = (os.path.join("pkg", *p) for p in (("sub", "c.py"), ("d.py",), ("sub", "e.py")))
    assert cycles == [f"pkg.d -> pkg.sub.e ({d}:1) -> pkg.sub.c ({e}:3) -> pkg.d ({c}:4)"]


def test_two_cycles_through_one_module_are_both_listed(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/hub.py": "from pkg import x, y\n",
        "pkg/x.py": "from pkg import hub\n",
        "pkg/y.py": "def f():\n    import pkg.hub\n",
    })
    cycles = find_cycles(import_edges(tmp_path, ("pkg",)))
    assert len(cycles) == 2
    assert cycles[0].startswith("pkg.hub -> pkg.x") and cycles[1].startswith("pkg.hub -> pkg.y")


@pytest.mark.parametrize("text", ["from pkg import b\n", "def f():\n    from . import b\n"])
def test_no_cycle_no_report(tmp_path: Path, text: str) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": text, "pkg/b.py": "import os\n"})
    assert find_cycles(import_edges(tmp_path, ("pkg",))) == []


def test_an_import_up_the_layers_is_found(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.high import b  # lazy: up all the same\n",
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "from pkg.low import a  # down: fine\n",
    })
    up = up_imports(import_edges(tmp_path, ("pkg",)), ("pkg.low", "pkg.high"))
    assert up == [("pkg.low.a", "pkg.high.b", f"{os.path.join('pkg', 'low', 'a.py')}:2")]
