"""Restore throughput beside `delta.in`: the same rows, the same replica, the same run.

The deltas are generated once (`bench.e2e_data`), then written twice: as a BACKUP_TO_KAFKA
topic (one writer stream, the changelog first, then every chunk body; keys as Prostore
writes them) for datamart A, and as `delta.in` messages for datamart B served by a fresh
agent. The bodies are the very same bytes (the restore reads `delta.in`-encoded bodies as
well as the backup writer's physical types), so only the path differs.

* restore: `podd-restore run` as a process, timed from the first message it reads to the
  last delta's commit (what it reports with `--json`);
* `delta.in`: every delta sent by the origin one at a time, each waited for, as the
  protocol requires; timed from the first chunk produced to the last answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.agent_run import AgentConfig, running_agent
from bench.cpu import MachineCpu
from bench.datagen import bench_schema
from bench.e2e import send_and_wait
from bench.e2e_data import PreparedDelta, prepare_deltas
from origin.client import OriginClient
from podd_kafka.settings import KafkaSettings
from protocol.backup_writer import BackupMessage, encode_backup_key, encode_changelog
from tools.backup_topic import BackupLayout, produce, prostore_changelog

ANSWER_TIMEOUT = 1800.0


def backup_messages(delta: PreparedDelta, run_id: str) -> Iterator[BackupMessage]:
    """A prepared delta as one increment written by one writer thread."""
    transfer = delta.transfer
    m = transfer.manifest
    schema = bench_schema(m.datamart, len(m.streams))
    bodies: list[tuple[str | None, Path | None]] = [(None, None)]
    for stream in m.streams:
        bodies += [(stream.table_name, path) for _, path in transfer.chunks_of(stream.table_name)]
    for number, (table, path) in enumerate(bodies, 1):
        key = encode_backup_key(
            increment_id=run_id,
            datamart=m.datamart,
            delta_num=m.delta_num,
            delta_date=m.delta_date,
            table_name=table,
            stream_number=1,
            stream_total=1,
            chunk_number=number,
            is_last_chunk=number == len(bodies),
        )
        value = encode_changelog(prostore_changelog(schema)) if path is None else path.read_bytes()
        yield BackupMessage(key, value, 0, table)


def _restore(
    kafka: KafkaSettings, bootstrap: str, dsn: str, topic: str, datamart: str, work: Path
) -> dict[str, Any]:
    env = {
        **os.environ,
        "PODD_BROKER": f"kafka://{bootstrap}",
        "PODD_REPLICA_DSN": dsn,
        "PODD_DATA_DIR": str(work / "restore"),
        "PODD_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "podd_restore.cli", "run", "--json", "--topic", topic]
    done = subprocess.run(
        [*command, "--datamart", datamart],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=ANSWER_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"podd-restore failed ({done.returncode}): {done.stderr[-2000:]}")
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


async def restore_beside_delta_in(
    kafka: KafkaSettings,
    bootstrap: str,
    dsn: str,
    root: Path,
    *,
    rows: int,
    deltas: int,
    tables: int,
    chunk_rows: int,
    spark_master: str,
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    per_delta = rows // deltas
    sizes = [(n, per_delta, n * int(per_delta * 0.7)) for n in range(deltas)]
    data = root / "restore-data"
    restored = f"bench_{tag}_restore"
    driven = f"bench_{tag}_deltain"
    print(f"restore: generating {deltas} deltas of {per_delta:,} rows, twice", flush=True)
    backup_deltas = prepare_deltas(data, restored, tables, sizes, chunk_rows)
    sent_deltas = prepare_deltas(data, driven, tables, sizes, chunk_rows)
    topic = f"bench-{tag}.backup"

    def every_message() -> Iterator[BackupMessage]:
        for delta in backup_deltas:
            yield from backup_messages(delta, f"bench-{tag}")

    print(f"restore: writing the backup topic {topic}", flush=True)
    await produce(kafka, [bootstrap], topic, BackupLayout().partitions, every_message())
    print("restore: podd-restore run", flush=True)
    with MachineCpu(None) as cpu:  # the restore's process is in "other"
        restore = _restore(kafka, bootstrap, dsn, topic, restored, root)

    print(f"restore: the same rows as {deltas} delta.in deltas", flush=True)
    config = AgentConfig(bootstrap, dsn, spark_master, f"bench-restore-{tag}")
    schema = bench_schema(driven, tables)
    seconds = 0.0
    with running_agent(config, [schema], root / "agent-restore", kafka.topic_environment()):
        async with OriginClient(kafka, [bootstrap]) as client:
            started = time.perf_counter()
            for delta in sent_deltas:
                await send_and_wait(client, delta, ANSWER_TIMEOUT)
            seconds = time.perf_counter() - started
    total = sum(d.rows for d in backup_deltas)
    return {
        "rows": total,
        "deltas": deltas,
        "restore_seconds": restore["read_to_commit_seconds"],
        "restore_process_seconds": restore["seconds"],
        "restore_rows_per_second": round(total / restore["read_to_commit_seconds"]),
        "delta_in_seconds": round(seconds, 3),
        "delta_in_rows_per_second": round(total / seconds),
        "restore_cpu": cpu.timeline.whole(),
    }
