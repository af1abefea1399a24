"""The import graph: no module imports from a layer above its own, and no two modules import each
other, directly or round a loop (DESIGN.md, "Dependencies point one way"; issue 35, item 4).

    base (errors, inputs, files) <- specs <- cost <- plan <- report / export / doctor / runtime <- api <- cli

Every `import` and `from ... import` of a bandwise module counts, at module level or inside a
function: a deferred import still ties the two modules together."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "bandwise"
LAYERS = {
    "errors": 0, "inputs": 0, "files": 0, "heap": 0,
    "specs": 1, "cost": 2, "plan": 3,
    "report": 4, "export": 4, "doctor": 4, "runtime": 4,
    "api": 5, "cli": 6, "__main__": 7,
}
FACADES = {
    "bandwise": "api",  # `import bandwise` gives the API's names (loaded on first use)
}
"""Packages whose `__init__` only forwards to the API: they sit in the API's layer."""


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(("bandwise", *parts)).removesuffix(".__init__")


def _layer(module: str) -> int:
    """The layer of a bandwise module; the package itself holds only its version, the lowest."""
    if module in FACADES:
        return LAYERS[FACADES[module]]
    top = module.split(".")[1] if "." in module else "errors"
    assert top in LAYERS, f"{module}: a top-level part with no layer; add it to LAYERS"
    return LAYERS[top]


@cache
def graph() -> dict[str, set[str]]:
    """Each bandwise module's bandwise imports, read once per process when a test first asks (not at
    collection: parsing every source file cost 0.4 s CPU of every `pytest --co`)."""
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for target in targets:
                # `from bandwise.x import y` names module x, or x.y when y is a module
                found = [t for t in (target, *(f"{target}.{a.name}" for a in getattr(node, "names", []))) if t in modules]
                graph[name].update(t for t in found if t != name)
    return graph


def test_no_import_points_up_the_layers():
    up = sorted(f"{m} -> {t}" for m, targets in graph().items() for t in targets if _layer(t) > _layer(m))
    assert not up, "imports from a higher layer:\n" + "\n".join(up)


def test_no_import_cycle():
    """Tarjan's strongly connected components: any component of more than one module is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph()[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph()):
        if v not in index:
            visit(v)
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_walk_sees_the_imports_it_checks():
    """The graph is read, not empty: a few edges every reader of the code can confirm."""
    edges = graph()
    assert "bandwise.cost.step" in edges["bandwise.plan.search"]
    assert "bandwise.specs.model" in edges["bandwise.cost.step"]
    assert "bandwise.runtime.layers" in edges["bandwise.runtime.moe"]
