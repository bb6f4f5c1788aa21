"""`podd-loader`, run as an operator runs it: a separate process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from protocol.ddl import parse_schema
from protocol.exit_codes import ExitCode
from protocol.workload import Workload, WorkloadSpec
from tests.conftest import REPO
from tests.loader.conftest import unique
from tests.loader.staging_helpers import stage
from tests.loader.test_adqm_store import DDL as ADQM_DDL
from tests.loader.test_adqm_store import random_delta

pytestmark = pytest.mark.slow


def podd_loader(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_loader.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )


def test_apply_by_hand_then_print_the_registry(tmp_path: Path, replica_dsn: str) -> None:
    schema = unique(parse_schema((REPO / "examples" / "marketing.sql").read_text()))
    ddl = tmp_path / "schema.sql"
    ddl.write_text(schema.to_ddl())
    rows = Workload(schema, WorkloadSpec(rows_per_delta=60, seed=2)).next_delta()
    transfer = stage(tmp_path / "staging", schema, 0, rows, chunk_rows=25)

    applied = podd_loader(
        "apply", str(transfer.directory), "--schema", str(ddl), "--replica", replica_dsn
    )
    assert applied.returncode == 0, applied.stderr
    assert f"delta 0 of {schema.datamart} applied" in applied.stdout
    assert "sales: received 20" in applied.stdout

    # again, with the schema from the replica's catalog: the stored result, no change
    again = podd_loader("apply", str(transfer.directory), "--replica", replica_dsn)
    assert again.returncode == 0, again.stderr
    assert "already applied" in again.stdout

    registry = podd_loader("registry", "--datamart", schema.datamart, "--replica", replica_dsn)
    assert registry.returncode == 0, registry.stderr
    assert transfer.manifest.request_id in registry.stdout
    assert "next expected delta: 1" in registry.stdout

    unknown = podd_loader("apply", str(tmp_path), "--replica", replica_dsn)
    assert unknown.returncode == ExitCode.CANNOT_RUN  # not a transfer: nothing was done
    assert "no manifest.json" in unknown.stderr


def test_psql_gets_the_password_in_its_environment_not_its_command_line(
    tmp_path: Path, replica_dsn: str
) -> None:
    password = conninfo_to_dict(replica_dsn).get("password")
    if not password:
        pytest.skip("the replica's DSN has no password (the embedded one has)")
    spy = tmp_path / "psql"
    spy.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {tmp_path}/argv\n'
        f'printf "%s" "$PGPASSWORD" > {tmp_path}/env\n'
    )
    spy.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "spark_loader.cli", "sql", "-c", "SELECT 1"],
        env={
            **os.environ,
            "PODD_REPLICA_DSN": replica_dsn,
            "PATH": str(tmp_path),
            "PODD_PSQL": str(spy),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert str(password) not in (tmp_path / "argv").read_text()
    assert (tmp_path / "env").read_text() == str(password)


def test_the_same_deltas_dump_the_same_lines_from_postgresql_and_clickhouse(
    tmp_path: Path, replica_dsn: str
) -> None:
    """`podd-loader apply` into either store, then `podd-loader dump`: one JSON line per row,
    the same lines from both, as of every delta."""
    schema = unique(parse_schema(ADQM_DDL))
    ddl = tmp_path / "schema.sql"
    ddl.write_text(schema.to_ddl())
    clickhouse = f"chdb://{tmp_path / 'clickhouse'}"
    rng = random.Random(8)
    for n in range(2):
        transfer = stage(tmp_path / "staging", schema, n, random_delta(rng, 80), chunk_rows=15)
        for replica in (replica_dsn, clickhouse):
            done = podd_loader(
                "apply", str(transfer.directory), "--schema", str(ddl), "--replica", replica
            )
            assert done.returncode == 0, done.stderr
    for n in range(2):
        dumps = [
            podd_loader(
                "dump", "--datamart", schema.datamart, "--as-of", str(n), "--replica", replica
            )
            for replica in (replica_dsn, clickhouse)
        ]
        assert [d.returncode for d in dumps] == [0, 0], [d.stderr for d in dumps]
        lines = [d.stdout.splitlines() for d in dumps]
        assert lines[0] == lines[1]
        assert {json.loads(line)["table"] for line in lines[0]} == {"orders", "items"}
    last = podd_loader("dump", "--datamart", schema.datamart, "--replica", clickhouse)
    assert last.stdout == dumps[1].stdout  # (the last applied delta by default)
