"""`podd-restore` into a ClickHouse replica (embedded, `chdb://`): a backup whose changelog
creates a table at delta 5, drops one at 12 and adds a view at 13 restores to the model as
of every delta, read back with `podd-loader dump`; the dropped table's versions are kept,
renamed. Every step is a process of its own (the embedded engine is one process's)."""

from __future__ import annotations

import json
from pathlib import Path

from protocol.apply_model import ReplicaModel, rows_as_of
from protocol.schema import LogicalSchema
from replica_store.dump import json_value
from tests.loader.test_cli import podd_loader
from tests.restore.conftest import Restore, changelog_backup, renamed, write_topic


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
    sales, agreements, dm = schema.table("sales"), schema.table("agreements"), schema.datamart
    messages, model = changelog_backup(schema, "run-c")
    write_topic(restore.broker, topic, 1, messages)

    clickhouse = f"chdb://{tmp_path / 'clickhouse'}"
    done = restore("run", "--topic", topic, "--datamart", dm, env={"PODD_REPLICA_DSN": clickhouse})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "table dropped by the changelog" in done.stderr
    assert "restored deltas 0-14" in done.stdout

    rest = schema.model_copy(update={"tables": (sales, agreements)})
    for n in (4, 11, 14):
        dumped = podd_loader("dump", "--datamart", dm, "--as-of", str(n), "--replica", clickhouse)
        assert dumped.returncode == 0, dumped.stderr[-3000:]
        assert dumped.stdout.splitlines() == model_lines(rest, model, n), n
    kept = f"`{dm}`.`stores_dropped_before_12_actual`"
    counted = podd_loader(
        "sql", "--replica", clickhouse, "-c", f"SELECT count() FROM {kept} FINAL WHERE sign = 1"
    )
    assert counted.returncode == 0, counted.stderr[-3000:]
    versions = model.tables["stores"]
    assert int(counted.stdout) == len(versions.actual) + len(versions.history)
    registry = podd_loader("registry", "--datamart", dm, "--replica", clickhouse, "--json")
    assert [e["delta_num"] for e in json.loads(registry.stdout)] == list(range(15))
