"""The sidecar's modules import one another without a circle.

Every import counts, those under ``if TYPE_CHECKING:`` and inside functions too: a
part that needs the driver says what it needs in a ``Protocol`` of its own, and the
driver, which composes the parts, is the only one that imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

SIDECAR = Path(__file__).resolve().parent.parent / "sidecar"


def _imports(path: Path) -> set[str]:
    """The sidecar modules ``path`` imports (relative or ``sidecar.`` imports)."""
    found: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1 and n.module:
                found.add(n.module.split(".")[0])
            elif n.level == 1:
                found.update(a.name for a in n.names)
            elif n.level == 0 and n.module and n.module.split(".")[0] == "sidecar":
                parts = n.module.split(".")
                if len(parts) > 1:
                    found.add(parts[1])
                else:
                    found.update(a.name for a in n.names)
        elif isinstance(n, ast.Import):
            for a in n.names:
                parts = a.name.split(".")
                if parts[0] == "sidecar" and len(parts) > 1:
                    found.add(parts[1])
    return found


def import_graph(root: Path = SIDECAR) -> dict[str, set[str]]:
    """Module name → the sidecar modules it imports (``__init__`` left out: it is the
    package's face and imports the parts it exports)."""
    modules = {p.stem: p for p in root.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(p) & modules.keys() - {name} for name, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path: Path) -> None:
    (tmp_path / "_a.py").write_text("from ._b import x\n")
    (tmp_path / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._c import y\n"
    )
    (tmp_path / "_c.py").write_text("def f():\n    from sidecar._a import z\n")
    (tmp_path / "_d.py").write_text("from ._a import x\n")
    assert cycles(import_graph(tmp_path)) == [["_a", "_b", "_c"]]


def test_no_import_cycle_in_the_sidecar() -> None:
    graph = import_graph()
    assert "_driver" in graph and graph["_api"], graph  # the walk sees the modules
    assert cycles(graph) == []
