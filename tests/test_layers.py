"""The package graph is a strict chain: no package imports a higher one, or a sibling.

    protocol ← podd_runtime ← podd_kafka, spark_loader ← replica_agent, origin
             ← conformance ← bench

Every import statement counts, also those inside functions (lazy imports are still arrows).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

LEVELS = {
    "protocol": 0,
    "podd_runtime": 1,
    "podd_kafka": 2,
    "spark_loader": 2,
    "replica_agent": 3,
    "podd_restore": 3,
    "origin": 3,
    "conformance": 4,
    "bench": 5,
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
