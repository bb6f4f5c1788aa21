"""The package graph is a strict chain: no package imports a higher one, or a sibling; and
no module imports itself through others (no cycle between two modules, in any package).

    protocol ← podd_runtime ← podd_kafka, replica_store ← spark_loader
             ← replica_agent, podd_restore, origin ← podd_cdc, conformance ← tools
             ← bench, reliability

Every import statement counts, also those inside functions (lazy imports are still arrows)
and those under `if TYPE_CHECKING:` (a cycle hidden from the interpreter is still a cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

LEVELS = {
    "protocol": 0,
    "podd_runtime": 1,
    "podd_kafka": 2,
    "replica_store": 2,
    "spark_loader": 3,
    "replica_agent": 4,
    "podd_restore": 4,
    "origin": 4,
    "podd_cdc": 5,
    "conformance": 5,
    "tools": 6,
    "bench": 7,
    "reliability": 7,
}
#: What `protocol` may import besides itself: no Kafka client, Spark or database.
PROTOCOL_FORBIDDEN = {"aiokafka", "faust", "pyspark", "py4j", "psycopg", "kafka", "mode"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import in a file."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(package: str) -> list[str]:
    level = LEVELS[package]
    wrong = []
    for path in sorted((REPO / package).rglob("*.py")):
        for line, module in imports_of(path):
            where = f"{path.relative_to(REPO)}:{line} imports {module}"
            if module in LEVELS and module != package and LEVELS[module] >= level:
                wrong.append(where)
            if package == "protocol" and module in PROTOCOL_FORBIDDEN:
                wrong.append(where)
    return wrong


@pytest.mark.parametrize("package", sorted(LEVELS))
def test_a_package_imports_only_lower_layers(package: str) -> None:
    assert violations(package) == []


def test_every_package_has_a_layer() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests"}
    assert packages == set(LEVELS)


def test_the_rule_sees_a_violation(tmp_path: Path) -> None:
    """The reader of imports finds lazy and dotted imports (else the tests above prove
    nothing)."""
    source = tmp_path / "m.py"
    source.write_text("import os.path\ndef f():\n    from replica_agent.tracker import X\n")
    assert imports_of(source) == [(1, "os"), (3, "replica_agent")]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(root: Path, path: Path, known: set[str]) -> set[str]:
    """The project modules a file imports (`from a import b` names `a.b` if it is a module)."""
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            module = target
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
    return found


def import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    files = {module_name(root, p): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    known = set(files)
    return {name: module_imports(root, path, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> Iterator[None]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                yield from visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))
        yield

    for node in sorted(graph):
        if node not in index:
            for _ in visit(node):
                pass
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(import_graph(REPO, [*sorted(LEVELS), "tests"])) == []


def test_the_cycle_rule_sees_a_cycle(tmp_path: Path) -> None:
    """A cycle made and then broken in a package laid out like ours: found, then gone. The
    arrow that closes it sits under `TYPE_CHECKING`, as the agent's old one did."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "service.py").write_text("from pkg.intake import Intake\n")
    (package / "intake.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import service\n"
    )
    (package / "other.py").write_text("from . import intake\n")
    assert cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.intake", "pkg.service"]]
    (package / "intake.py").write_text("import pkg.other\n")
    assert cycles(import_graph(tmp_path, ["pkg"])) == [["pkg.intake", "pkg.other"]]
    (package / "other.py").write_text("")
    assert cycles(import_graph(tmp_path, ["pkg"])) == []


def test_tests_take_no_fixture_from_the_bench() -> None:
    """`bench` only measures: a test imports it only to test the bench itself."""
    users = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("*.py")
        if not path.name.startswith("test_bench_")
        and any(module == "bench" for _, module in imports_of(path))
    )
    assert users == []


def test_the_wheel_ships_no_measurement_tool_or_test() -> None:
    import tomllib  # noqa: PLC0415

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in shipped} == set(LEVELS) - {"bench", "tools", "reliability"}


def test_the_cdc_topic_writers_import_nothing_of_the_readers() -> None:
    """A test that writes a topic with `tools.cdc_write` and reads it with `podd_cdc` checks
    both against the contract, not one against the other."""
    writers = sorted((REPO / "tools" / "cdc_write").glob("*.py"))
    assert writers
    for path in writers:
        read = [module for _, module in imports_of(path) if module == "podd_cdc"]
        assert not read, f"{path.name} imports the CDC readers"


def _python_files() -> list[Path]:
    return [p for package in LEVELS for p in sorted((REPO / package).rglob("*.py"))] + sorted(
        (REPO / "tests").rglob("*.py")
    )


def test_no_line_is_kept_from_the_formatter_and_no_module_is_long() -> None:
    """Modules stay small by splitting responsibilities, never by packing lines: no statement
    is kept from `ruff format` (a table of data laid out by hand between `fmt: off` and `on`
    is not packing), and no module passes 400 lines."""
    skipped = "# fmt: " + "skip"  # (spelled so, this file holds no such comment)
    packed = [
        f"{p.relative_to(REPO)}:{n}"
        for p in _python_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if line.rstrip().endswith(skipped)
    ]
    assert not packed
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in _python_files()
        if (n := len(p.read_text().splitlines())) > 400
    ]
    assert not long
