"""Real parts for the restore tests: backup topics written on the test broker as Prostore
writes them, and `podd-restore` run as a process (its own Spark, local[2]) on the test
replica, as an operator runs it."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from origin.sources import WorkloadSource
from podd_kafka.settings import Compression, KafkaSettings
from protocol.apply_model import ReplicaModel, apply_delta, last_row_per_key
from protocol.backup import ChangelogRecord
from protocol.backup_writer import BackupMessage, increment_messages
from protocol.schema import LogicalSchema, table_ddl
from protocol.workload import WorkloadSpec
from tools.backup_topic import produce

REPO = Path(__file__).resolve().parents[2]


def renamed(schema: LogicalSchema) -> LogicalSchema:
    return schema.model_copy(update={"datamart": f"r_{uuid.uuid4().hex[:10]}"})


def write_topic(
    broker: str,
    topic: str,
    partitions: int,
    messages: Iterable[BackupMessage],
    compression: Compression | None = None,
) -> int:
    settings = KafkaSettings(compression_type=compression)
    return asyncio.run(produce(settings, [broker], topic, partitions, iter(messages)))


def with_duplicates(
    messages: Sequence[BackupMessage], ratio: float, seed: int = 1
) -> list[BackupMessage]:
    """`messages` with a share of them sent again later (a writer's retries)."""
    rng = random.Random(seed)
    again = [m for m in messages if rng.random() < ratio]
    return [*messages, *again]


@dataclass
class Restore:
    broker: str
    dsn: str
    data_dir: Path

    def __call__(
        self, command: str, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "podd_restore.cli", command, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **self.env(), **(env or {})},
        )

    def env(self) -> dict[str, str]:
        return {
            "PODD_BROKER": f"kafka://{self.broker}",
            "PODD_REPLICA_DSN": self.dsn,
            "PODD_DATA_DIR": str(self.data_dir),
            "PODD_SPARK_MASTER": "local[2]",
            "PODD_LOG_FORMAT": "json",
        }


def changelog_backup(
    schema: LogicalSchema, increment_id: str, *, whole_history: bool = False
) -> tuple[list[BackupMessage], ReplicaModel]:
    """15 deltas of `marketing` whose changelog creates sales and stores at 0, agreements at
    5, drops stores at 12 and adds a view at 13; the model of their rows. History-to-date:
    the increment of delta N carries the changes up to N; `whole_history`: one run wrote
    every increment after the drop, each with the whole history."""
    sales, stores, agreements = (schema.table(n) for n in ("sales", "stores", "agreements"))
    dm = schema.datamart
    timeline = [  # (from delta, the change as Prostore writes it)
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
            if since <= n or whole_history
        ]
        rows = {t: list(last_row_per_key(schema.table(t), r).values()) for t, r in rows.items()}
        messages += increment_messages(
            increment_id=increment_id,
            datamart=dm,
            delta_num=n,
            delta_date=delta.date,
            changelog=changelog,
            rows={schema.table(t): r for t, r in rows.items()},
            threads=2,
            partitions=1,
            chunk_rows=20,
        )
        model, _ = apply_delta(model, n, delta.date, rows)
    return messages, model


@pytest.fixture
def restore(broker: str, replica_dsn: str, tmp_path: Path) -> Restore:
    return Restore(broker, replica_dsn, tmp_path / "restore")


@pytest.fixture
def topic() -> str:
    return f"backup-{uuid.uuid4().hex[:8]}"
