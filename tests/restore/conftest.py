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

from origin.backup import produce
from podd_kafka.settings import Compression, KafkaSettings
from protocol.backup_writer import BackupMessage
from protocol.schema import LogicalSchema

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


@pytest.fixture
def restore(broker: str, replica_dsn: str, tmp_path: Path) -> Restore:
    return Restore(broker, replica_dsn, tmp_path / "restore")


@pytest.fixture
def topic() -> str:
    return f"backup-{uuid.uuid4().hex[:8]}"
