"""kill -9 of a process loading the ADQM store (embedded ClickHouse): inside a table's
publish (its rows staged, not moved), between one table's publish and the next, after every
table and before the registry row, and right after the registry row (the answer lost). The
next process finds the replica equal to the model as of every registered delta, and the
delta loads (or is found applied) exactly once."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.apply_model import ReplicaModel, apply_delta, rows_as_of
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from tests.loader.conftest import unique
from tests.loader.staging_helpers import delta_date, stage
from tests.loader.test_adqm_store import DDL, random_delta

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def child(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.loader.adqm_crash_child", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def expected(model: ReplicaModel, schema: LogicalSchema, through: int) -> dict[str, object]:
    return {
        t.name: [
            sorted(repr(row) for row in rows_as_of(model.tables[t.name], n))
            for n in range(through + 1)
        ]
        for t in schema
    }


@pytest.mark.parametrize(
    "kill",
    [
        ["--kill-after-publish", "1"],  # a table's rows in its publish staging, not moved
        ["--kill-after-attach", "1"],
        ["--kill-after-attach", "2"],
        ["--kill-after-register"],
    ],
)
def test_a_load_killed_anywhere_leaves_the_replica_as_of_its_registry(
    tmp_path: Path, kill: list[str]
) -> None:
    schema = unique(parse_schema(DDL))
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(schema.model_dump_json())
    directory = str(tmp_path / "chdb")
    rng, model, transfers = random.Random(5), ReplicaModel(schema), []
    for n in range(3):
        rows = random_delta(rng, 40)
        transfers.append(str(stage(tmp_path / "staged", schema, n, rows).directory))
        model, _ = apply_delta(model, n, delta_date(n), rows)
    loaded = child("load", directory, str(schema_file), *transfers[:2])
    assert loaded.returncode == 0, loaded.stderr[-3000:]

    killed = child("load", directory, str(schema_file), transfers[2], *kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    dumped = child("dump", directory, str(schema_file), "2")
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    found = json.loads(dumped.stdout.strip().splitlines()[-1])
    registered = found["registered"]
    assert registered == ([0, 1, 2] if kill == ["--kill-after-register"] else [0, 1])
    last = registered[-1]
    assert {t: rows[: last + 1] for t, rows in found["state"].items()} == expected(
        model, schema, last
    )
    assert all(rows[last + 1 :] == [rows[last]] * (2 - last) for rows in found["state"].values())

    again = child("load", directory, str(schema_file), *transfers)
    assert again.returncode == 0, again.stderr[-3000:]
    dumped = child("dump", directory, str(schema_file), "2")
    found = json.loads(dumped.stdout.strip().splitlines()[-1])
    assert found == {"state": expected(model, schema, 2), "registered": [0, 1, 2]}
