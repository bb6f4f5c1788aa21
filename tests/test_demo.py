"""The README's main command, run small: embedded parts, then external ones given by flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from origin import demo
from protocol.schema import LogicalSchema
from replica_store.embedded_pg import EmbeddedPostgres
from tests.agent.conftest import renamed

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
        *SMALL, "--data-dir", str(tmp_path / "var"), "--schema", str(schema_file),
        "--broker", f"kafka://{broker}", "--replica", replica_dsn,
    ]  # fmt: skip
    assert demo.main(argv) == 0
    out = capsys.readouterr().out
    assert f"replica {schema.datamart}" in out
    assert "equal to the reference model of deltas 0..2" in out
    assert not (tmp_path / "var" / "postgres").exists()  # no embedded server was started
