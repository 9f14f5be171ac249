"""The layout docs/architecture.md promises, checked on the source: no import runs up its table
of packages, and no modules import each other round in a cycle (counting imports made inside
functions and under TYPE_CHECKING: a cycle there is a cycle of knowledge all the same).

A row of the table may name a subpackage (``brook.coordinator.common``): a module belongs to the
longest row its name starts with, and the package holding such rows (``brook.coordinator``) is
only a container, which imports nothing of brook."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: Modules beside the table: foundations anyone may use, entry points that may use anything.
FOUNDATIONS = {"brook", "brook.clock", "brook.properties"}  # brook: its __version__
ENTRY_POINTS = re.compile(r"^brook\.(__main__|demo\w*|cli\.app)$")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in (SRC / "brook").rglob("*.py")}


def imports_of(name: str, path: Path) -> set[str]:
    """The brook modules `name` imports anywhere in its file (a package's `__init__` stands
    for a name imported from it that is not a module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in MODULES else module)
    return {m for m in found if m in MODULES and m != name}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Every module's imports of brook modules (parsed when a test asks: every test worker
    imports this file to collect it, and only one runs its tests)."""
    return {name: imports_of(name, path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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
                        found.append(sorted(component))
    return found


def table_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(brook\.\w+(?:\.\w+)*)` \|", text, re.M)


def package_of(module: str, order: list[str]) -> str:
    """The row of the table ``module`` belongs to: the longest one its name starts with (else
    its package: ``brook.x``, or ``brook.x.y`` inside a container)."""
    rows = [p for p in order if module == p or module.startswith(p + ".")]
    if rows:
        return max(rows, key=len)
    parts = module.split(".")
    top = ".".join(parts[:2])
    return ".".join(parts[:3]) if len(parts) > 2 and is_container(top, order) else top


def is_container(module: str, order: list[str]) -> bool:
    """Whether ``module`` is a package whose subpackages are rows of the table."""
    return module not in order and any(p.startswith(module + ".") for p in order)


def upward_imports(graph: dict[str, set[str]], order: list[str]) -> tuple[list, set]:
    """(the imports running up the table ``order``, the packages missing from it)."""
    rank = {package: i for i, package in enumerate(order)}
    upward, unplaced = [], set()
    for module, deps in graph.items():
        if ENTRY_POINTS.match(module):
            continue
        if module in FOUNDATIONS or is_container(module, order):
            upward += [(module, d) for d in deps]  # foundations use nothing of brook
            continue
        home = package_of(module, order)
        if home not in rank:
            unplaced.add(home)
            continue
        for dep in deps:
            there = package_of(dep, order)
            if dep in FOUNDATIONS or there == home:
                continue
            if there not in rank or rank[there] > rank[home]:
                upward.append((module, dep))
    return upward, unplaced


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other_round_in_a_cycle():
    assert cycles(import_graph()) == []


def test_the_table_checker_places_subpackages_by_their_longest_row():
    order = ["brook.records", "brook.coordinator.common", "brook.coordinator.group", "brook.broker"]
    assert package_of("brook.coordinator.common.runtime", order) == "brook.coordinator.common"
    assert package_of("brook.coordinator.group", order) == "brook.coordinator.group"
    assert package_of("brook.records.batch", order) == "brook.records"
    graph = {
        "brook.coordinator.group.shard": {"brook.coordinator.common.runtime", "brook.records"},
        "brook.coordinator.common.runtime": {"brook.coordinator.group.shard"},
        "brook.coordinator": set(),
        "brook.broker.server": {"brook.coordinator.group.shard"},
    }
    assert upward_imports(graph, order) == (
        [("brook.coordinator.common.runtime", "brook.coordinator.group.shard")], set())
    assert upward_imports({"brook.coordinator": {"brook.records"}}, order)[0] == [
        ("brook.coordinator", "brook.records")]  # a container imports nothing
    assert upward_imports({"brook.coordinator.transaction.shard": set()}, order)[1] == {
        "brook.coordinator.transaction"}  # a subpackage without a row of its own is missing


def test_the_coordinators_runtime_comes_before_the_coordinators_that_run_on_it():
    order = table_order()
    assert order.index("brook.coordinator.common") < order.index("brook.coordinator.group")


def test_no_import_runs_up_the_table_of_docs_architecture():
    order = table_order()
    assert len(order) >= 10 and "brook.storage" in order, order
    upward, unplaced = upward_imports(import_graph(), order)
    assert not unplaced, f"packages missing from docs/architecture.md's table: {sorted(unplaced)}"
    assert not upward, "imports running up docs/architecture.md's table:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(upward))
