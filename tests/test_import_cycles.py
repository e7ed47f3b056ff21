"""The package's modules import one way: no module reaches itself again through its imports."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> set[str]:
    """The recsys modules a module imports, at any depth (in functions too), except under
    `if TYPE_CHECKING:`, which never runs."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("recsys"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("recsys")}
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in (ROOT / "recsys").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        graph[module] = _imports(ast.parse(path.read_text()))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle found by a depth-first walk, each as the modules along it."""
    found, done, path = [], set(), []

    def visit(module: str) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done or module not in graph:
            return
        path.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
