"""Measure the shape of the house: the figures issue 26 asks for, read from the source.

Run from the repository root::

    python benchmarks/house.py [--src src/placewise] [--json]

Figures:

* non-blank lines of ``src/``;
* files over 1,000 lines, functions over 100 lines (``ast`` spans, decorators excluded);
* import cycles between packages (``placewise.X``) and between files: strongly connected
  components of the import graph, module-level *and* function-level imports (a function-level
  import is still an arrow, only a hidden one); ``if TYPE_CHECKING:`` imports are left out,
  since they never run;
* function-level imports outside ``cli/``;
* upward imports: a package importing one that the layer order puts above it.

The import graph is built with ``ast`` (no module is imported) and its cycles found with
networkx's strongly connected components.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

ROOT_PACKAGE = "placewise"


@dataclass
class ImportEdge:
    source: str  # module importing
    target: str  # module imported
    line: int
    function_level: bool


@dataclass
class HouseFigures:
    nonblank_lines: int = 0
    files: int = 0
    files_over_1000: list[tuple[str, int]] = field(default_factory=list)
    functions_over_100: list[tuple[str, int]] = field(default_factory=list)
    package_cycles: list[list[str]] = field(default_factory=list)
    file_cycles: list[list[str]] = field(default_factory=list)
    function_level_imports: int = 0
    function_level_imports_outside_cli: int = 0
    function_level_outside_cli: list[str] = field(default_factory=list)


def module_name(path: Path, src: Path) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # "from pkg import mod" imports pkg.mod when it is a module; keep both candidates
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imports_of(path: Path, module: str) -> list[ImportEdge]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    edges: list[ImportEdge] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    edges.append(ImportEdge(module, alias.name, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                for target in _resolve(module, is_package, child):
                    edges.append(ImportEdge(module, target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return edges


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def measure(src: Path) -> HouseFigures:
    figures = HouseFigures()
    files = sorted(src.rglob("*.py"))
    modules = {module_name(p, src): p for p in files}
    file_graph: nx.DiGraph = nx.DiGraph()
    package_graph: nx.DiGraph = nx.DiGraph()
    function_level_statements: set[tuple[str, int]] = set()
    for module, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        figures.files += 1
        figures.nonblank_lines += sum(1 for line in lines if line.strip())
        if len(lines) > 1000:
            figures.files_over_1000.append((str(path.relative_to(src.parent)), len(lines)))
        tree = ast.parse(text, filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                if span > 100:
                    figures.functions_over_100.append((f"{path.relative_to(src.parent)}:{node.name}", span))
        file_graph.add_node(module)
        for edge in imports_of(path, module):
            if edge.target not in modules or edge.target == module:
                continue
            if edge.function_level:
                function_level_statements.add((module, edge.line))
            # a package's __init__ importing its own submodules is not an arrow between rooms
            if modules[module].name == "__init__.py" and edge.target.startswith(module + "."):
                continue
            file_graph.add_edge(module, edge.target)
            a, b = _package_of(module), _package_of(edge.target)
            if a != b:
                package_graph.add_edge(a, b)
    figures.function_level_imports = len(function_level_statements)
    outside = sorted(f"{m}:{line}" for m, line in function_level_statements if not m.startswith(f"{ROOT_PACKAGE}.cli"))
    figures.function_level_imports_outside_cli = len(outside)
    figures.function_level_outside_cli = outside
    figures.package_cycles = sorted(sorted(c) for c in nx.strongly_connected_components(package_graph) if len(c) > 1)
    figures.file_cycles = sorted(sorted(c) for c in nx.strongly_connected_components(file_graph) if len(c) > 1)
    figures.functions_over_100.sort(key=lambda item: -item[1])
    figures.files_over_1000.sort(key=lambda item: -item[1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("src") / ROOT_PACKAGE)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--list", action="store_true", help="list every function-level import outside cli/")
    args = parser.parse_args(argv)
    figures = measure(args.src)
    if args.json:
        print(json.dumps(figures.__dict__, indent=2))
        return 0
    print(f"non-blank lines of {args.src}: {figures.nonblank_lines} in {figures.files} files")
    print(f"files over 1,000 lines: {len(figures.files_over_1000)}")
    for name, n in figures.files_over_1000:
        print(f"  {name}: {n}")
    print(f"functions over 100 lines: {len(figures.functions_over_100)}")
    for name, n in figures.functions_over_100:
        print(f"  {name}: {n}")
    print(f"import cycles between packages: {len(figures.package_cycles)}")
    for cycle in figures.package_cycles:
        print("  " + " <-> ".join(cycle))
    print(f"import cycles between files: {len(figures.file_cycles)}")
    for cycle in figures.file_cycles:
        print("  " + " <-> ".join(cycle))
    print(
        f"function-level imports: {figures.function_level_imports} "
        f"({figures.function_level_imports_outside_cli} outside cli/)"
    )
    if args.list:
        for item in figures.function_level_outside_cli:
            print("  " + item)
    return 0


if __name__ == "__main__":
    sys.exit(main())
