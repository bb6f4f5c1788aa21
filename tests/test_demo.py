"""The README's main command, run small: embedded parts, then external ones given by flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from origin import demo
from protocol.schema import LogicalSchema
from replica_store.embedded_pg import EmbeddedPostgres
from tests.agent.conftest import renamed
from tests.conftest import REPO

pytestmark = pytest.mark.slow

SMALL = [
    "--deltas",
    "3",
    "--rows-per-delta",
    "90",
    "--chunk-rows",
    "7",
    "--spark-master",
    "local[2]",
]


def test_demo_on_embedded_defaults_applies_checks_and_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main([*SMALL, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[##############################] 3/3 deltas, 270 rows" in out
    assert "applied deltas 0..2: 3 deltas, 270 rows" in out
    assert "equal to the reference model of deltas 0..2 (seed 1)" in out
    assert '"marketing"."sales_as_of"(1)' in out
    assert "agent stopped (exit 0)" in out
    assert EmbeddedPostgres(tmp_path / "postgres").running_port() is None
    # A second run goes on from what the replica holds.
    assert demo.main([*SMALL, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "applied deltas 3..5" in out
    assert "equal to the reference model of deltas 0..5" in out


def test_demo_against_an_external_broker_and_database(
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = renamed(marketing)
    schema_file = tmp_path / "schema.sql"
    schema_file.write_text(schema.to_ddl())
    argv = [
        *SMALL,
        "--data-dir",
        str(tmp_path / "var"),
        "--schema",
        str(schema_file),
        "--broker",
        f"kafka://{broker}",
        "--replica",
        replica_dsn,
    ]
    assert demo.main(argv) == 0
    out = capsys.readouterr().out
    assert f"replica {schema.datamart}" in out
    assert "equal to the reference model of deltas 0..2" in out
    assert not (tmp_path / "var" / "postgres").exists()  # no embedded server was started


def test_demo_on_clickhouse_applies_checks_and_prints_clickhouse_sql(tmp_path: Path) -> None:
    """`podd-demo --store clickhouse`, as a process (the embedded ClickHouse is one
    process's, and this test process may hold another)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "origin.demo",
            *SMALL,
            "--store",
            "clickhouse",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "applied deltas 0..2: 3 deltas, 270 rows" in out
    assert f"(ClickHouse, chdb://{tmp_path}/clickhouse)" in out
    assert "equal to the reference model of deltas 0..2, also as of deltas 0..2" in out
    assert "FROM `marketing`.`sales_as_of`(n = 1)" in out
    assert "agent stopped (exit 0)" in out
    assert not (tmp_path / "postgres").exists()  # no PostgreSQL was started
