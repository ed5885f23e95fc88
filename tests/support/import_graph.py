"""The import graph of a package, read statically (`ast`), and its cycles (issue 41 item 5).

Every `import` / `from ... import` statement counts, wherever it stands: at module level, inside a
function (a circle closed only by an import inside a function is still a circle: it runs the
moment that function is called), under `if TYPE_CHECKING:` or in a `try:`. Relative imports are
resolved against the importing module. `importlib.import_module("layoutc.x")` is an import of
layoutc.x; with an f-string `f"pkg.{name}"`, of every module of pkg (an over-approximation).

An edge goes to the most specific module a statement names: `from p import x` is an edge to the
module `p.x` when that is a module, else to `p` (its `__init__`, whose namespace holds `x`).
Importing `a.b.c` also runs the `__init__` of `a` and `a.b`: those are edges too, except the
packages that contain the importer. Python initialises a module's own parent packages before the
module itself, so `p.x` naming its sibling `p.y` does not make `p.x` depend on `p/__init__.py`
(that edge would make every package whose `__init__` re-exports a submodule a false cycle);
`p.x` importing a *name* from `p` does (`from p import helper`), and is counted.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `path:line`; `how` is "module", "function" (inside a def or
    lambda), "import_module" (`importlib.import_module` with a module name written in the code),
    or "package" (the `__init__` of a package above a named module)."""

    source: str
    target: str
    path: str
    line: int
    how: str


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """name -> (file, is a package) for every .py file under root/package."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        is_pkg = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


def _resolve(name: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = (name if is_pkg else name.rpartition(".")[0]).split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _dynamic(node: ast.AST, mods: dict[str, tuple[Path, bool]]) -> list[str] | None:
    """The modules `importlib.import_module(...)` may import: the one a constant string names,
    or, for an f-string whose text starts with `pkg.`, every module of the package pkg (the
    verifier's registry imports each property module by name). None: not such a call."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name)):
        return None
    func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    arg = node.args[0]
    if func != "import_module":
        return None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(head := arg.values[0], ast.Constant):
        package = str(head.value).rpartition(".")[0]
        return [m for m in mods if m.rpartition(".")[0] == package] if package in mods else []
    return []


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def edges(root: Path, package: str) -> list[Edge]:
    """Every import edge between the modules of `package` (module docstring)."""
    mods = modules(root, package)
    out: list[Edge] = []
    for name, (path, is_pkg) in mods.items():
        own = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        stack: list[tuple[ast.AST, bool]] = [(tree, False)]
        while stack:
            node, in_function = stack.pop()
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                stack.append((child, nested))
                how = "function" if nested else "module"
                if isinstance(child, ast.Import):
                    named = [alias.name for alias in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = _resolve(name, is_pkg, child)
                    named = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in child.names]
                elif (dynamic := _dynamic(child, mods)) is not None:
                    named, how = dynamic, "import_module"
                else:
                    continue
                for target in named:
                    while target and target not in mods:  # `import a.b.c.func`-like: the module holding it
                        target = target.rpartition(".")[0]
                    if not target or target == name:
                        continue
                    rel = str(path.relative_to(root))
                    out.append(Edge(name, target, rel, child.lineno, how))
                    above = target.rpartition(".")[0]
                    while above and not _inside(own, above):
                        out.append(Edge(name, above, rel, child.lineno, "package"))
                        above = above.rpartition(".")[0]
    return out


@dataclass(frozen=True)
class Cycle:
    """A strongly connected component of more than one module (`members`, sorted) and one
    shortest cycle through its first member (`edges`, in order), which names where it closes."""

    members: tuple[str, ...]
    edges: tuple[Edge, ...]


def cycles(all_edges: list[Edge]) -> list[Cycle]:
    """Every strongly connected component of more than one module (Tarjan's algorithm,
    iterative), each with one shortest cycle through it."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in all_edges:
        graph.setdefault(e.source, {}).setdefault(e.target, e)
        graph.setdefault(e.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
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
                    components.append(sorted(comp))
    found: list[Cycle] = []
    for comp in components:
        members = set(comp)
        first = comp[0]
        parent: dict[str, Edge] = {}
        queue = deque([first])
        seen = {first}
        while queue:  # shortest path first -> ... -> first inside the component
            v = queue.popleft()
            for w, e in sorted(graph[v].items()):
                if w not in members:
                    continue
                if w == first:
                    path = [e]
                    while path[0].source != first:
                        path.insert(0, parent[path[0].source])
                    found.append(Cycle(tuple(comp), tuple(path)))
                    queue.clear()
                    break
                if w not in seen:
                    seen.add(w)
                    parent[w] = e
                    queue.append(w)
    return found


def describe(cycle: Cycle) -> str:
    """One cycle in words: each edge with where it stands and how, then every module caught in
    the same component (each is on some cycle through the first)."""
    path = " -> ".join([cycle.edges[0].source, *(f"{e.target} ({e.path}:{e.line}, {e.how})" for e in cycle.edges)])
    return f"{path}\n    {len(cycle.members)} modules in this circle: {', '.join(cycle.members)}"
