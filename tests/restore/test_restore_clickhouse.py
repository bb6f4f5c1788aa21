"""`podd-restore` into a ClickHouse replica (embedded, `chdb://`): a backup whose changelog
creates a table at delta 5, drops one at 12 and adds a view at 13 restores to the model as
of every delta, read back with `podd-loader dump`; the dropped table's versions are kept,
renamed. Every step is a process of its own (the embedded engine is one process's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from origin.sources import WorkloadSource
from protocol.apply_model import ReplicaModel, apply_delta, last_row_per_key, rows_as_of
from protocol.backup import ChangelogRecord
from protocol.backup_writer import BackupMessage, increment_messages
from protocol.schema import LogicalSchema, table_ddl
from protocol.workload import WorkloadSpec
from replica_store.dump import json_value
from tests.restore.conftest import REPO, Restore, renamed, write_topic


def loader(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_loader.cli", *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
    )  # fmt: skip


def model_lines(schema: LogicalSchema, model: ReplicaModel, n: int) -> list[str]:
    """What `podd-loader dump --as-of n` prints for the model (tables in schema order)."""
    lines = []
    for table in schema:
        names = table.column_names
        rows = rows_as_of(model.tables[table.name], n)
        lines += sorted(
            json.dumps(
                {"table": table.name, "row": dict(zip(names, map(json_value, row), strict=True))},
                ensure_ascii=False,
            )
            for row in rows
        )
    return lines


def test_a_backup_with_a_changelog_restores_into_clickhouse(
    restore: Restore, topic: str, marketing: LogicalSchema, tmp_path: Path
) -> None:
    schema = renamed(marketing)
    sales, stores, agreements = (schema.table(n) for n in ("sales", "stores", "agreements"))
    dm = schema.datamart
    timeline = [
        (0, table_ddl(dm, sales).rstrip(";") + ")"),
        (0, table_ddl(dm, stores).rstrip(";") + ")"),
        (5, table_ddl(dm, agreements).rstrip(";") + ")"),
        (12, f"DROP TABLE {dm}.stores"),
        (13, f"CREATE VIEW {dm}.big_sales AS SELECT * FROM {dm}.sales WHERE id > 10"),
    ]
    live = {
        0: {"sales", "stores"},
        5: {"sales", "stores", "agreements"},
        12: {"sales", "agreements"},
    }
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=45, seed=8))
    model = ReplicaModel(schema)
    messages: list[BackupMessage] = []
    for n in range(15):
        delta = source.delta(n)
        assert delta is not None
        tables = live[max(d for d in live if d <= n)]
        rows = {t: r for t, r in delta.rows_by_table.items() if t in tables}
        changelog = [
            ChangelogRecord(change_num=i, entity_name=dm, change_query=query)
            for i, (since, query) in enumerate(timeline)
            if since <= n
        ]
        rows = {t: list(last_row_per_key(schema.table(t), r).values()) for t, r in rows.items()}
        messages += increment_messages(
            increment_id="run-c", datamart=dm, delta_num=n, delta_date=delta.date,
            changelog=changelog, rows={schema.table(t): r for t, r in rows.items()},
            threads=2, partitions=1, chunk_rows=20,
        )  # fmt: skip
        model, _ = apply_delta(model, n, delta.date, rows)
    write_topic(restore.broker, topic, 1, messages)

    clickhouse = f"chdb://{tmp_path / 'clickhouse'}"
    done = restore("run", "--topic", topic, "--datamart", dm, env={"PODD_REPLICA_DSN": clickhouse})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "table dropped by the changelog" in done.stderr
    assert "restored deltas 0-14" in done.stdout

    rest = schema.model_copy(update={"tables": (sales, agreements)})
    for n in (4, 11, 14):
        dumped = loader("dump", "--datamart", dm, "--as-of", str(n), "--replica", clickhouse)
        assert dumped.returncode == 0, dumped.stderr[-3000:]
        assert dumped.stdout.splitlines() == model_lines(rest, model, n), n
    kept = f"`{dm}`.`stores_dropped_before_12_actual`"
    counted = loader(
        "sql", "--replica", clickhouse, "-c", f"SELECT count() FROM {kept} FINAL WHERE sign = 1"
    )
    assert counted.returncode == 0, counted.stderr[-3000:]
    versions = model.tables["stores"]
    assert int(counted.stdout) == len(versions.actual) + len(versions.history)
    registry = loader("registry", "--datamart", dm, "--replica", clickhouse, "--json")
    assert [e["delta_num"] for e in json.loads(registry.stdout)] == list(range(15))
