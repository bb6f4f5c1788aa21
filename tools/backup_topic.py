"""A delta source written to a topic as BACKUP_TO_KAFKA writes it (`tools.write_backup`).

Incremental: one increment per delta with its original number and date, the changelog of
the schema up to it (Prostore's `CREATE TABLE` with its stray closing parenthesis). Snapshot:
the state after delta `last - depth` as delta 0 (every live row an upsert, dated as that
delta), then the `depth` deltas after it renumbered 1..depth. Messages are laid out over
`threads` writer streams and `partitions` partitions (`protocol.backup_writer`). The topic
is created with `partitions` partitions when it does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from origin.errors import OriginError
from origin.sources import DeltaSource, SourceDelta
from podd_kafka.client import aiokafka_options, partition_count
from podd_kafka.settings import KafkaSettings
from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta, last_row_per_key
from protocol.backup import ChangelogRecord
from protocol.backup_writer import BackupMessage, increment_messages
from protocol.schema import LogicalSchema, table_ddl


@dataclass(frozen=True)
class BackupLayout:
    threads: int = 1
    partitions: int = 1
    chunk_rows: int = 1000


def prostore_changelog(schema: LogicalSchema) -> list[ChangelogRecord]:
    """The schema's tables as Prostore's changelog records them: one `CREATE TABLE` each,
    without the `;` and with one `)` too many."""
    return [
        ChangelogRecord(
            change_num=number,
            entity_name=schema.datamart,
            change_query=table_ddl(schema.datamart, table).rstrip(";") + ")",
        )
        for number, table in enumerate(schema.tables)
    ]


def _messages(
    schema: LogicalSchema,
    delta: SourceDelta,
    number: int,
    increment_id: str,
    layout: BackupLayout,
) -> list[BackupMessage]:
    return increment_messages(
        increment_id=increment_id,
        datamart=schema.datamart,
        delta_num=number,
        delta_date=delta.date,
        changelog=prostore_changelog(schema),
        # An increment holds one row per key and table (BACKUP.md): the last one.
        rows={
            schema.table(name): list(last_row_per_key(schema.table(name), rows).values())
            for name, rows in delta.rows_by_table.items()
        },
        threads=layout.threads,
        partitions=layout.partitions,
        chunk_rows=layout.chunk_rows,
    )


def _delta(source: DeltaSource, number: int) -> SourceDelta:
    delta = source.delta(number)
    if delta is None:
        raise OriginError(f"the source has no delta {number}")
    return delta


def incremental(
    source: DeltaSource, deltas: Sequence[int], layout: BackupLayout, increment_id: str | None
) -> Iterator[BackupMessage]:
    run = increment_id or str(uuid.uuid4())
    for number in deltas:
        yield from _messages(source.schema, _delta(source, number), number, run, layout)


def snapshot(
    source: DeltaSource, last: int, depth: int, layout: BackupLayout, increment_id: str | None
) -> Iterator[BackupMessage]:
    if not 0 <= depth <= last:
        raise OriginError(f"a snapshot of delta {last} cannot reach {depth} deltas back")
    run = increment_id or str(uuid.uuid4())
    base = last - depth
    model = ReplicaModel(source.schema)
    for number in range(base + 1):
        delta = _delta(source, number)
        model, _ = apply_delta(model, number, delta.date, delta.rows_by_table)
    state = {
        name: [DeltaRow(v.values, 0) for v in versions.actual.values()]
        for name, versions in model.tables.items()
    }
    zero = SourceDelta(0, _delta(source, base).date, state)
    yield from _messages(source.schema, zero, 0, run, layout)
    for renumbered, number in enumerate(range(base + 1, last + 1), 1):
        yield from _messages(source.schema, _delta(source, number), renumbered, run, layout)


async def produce(
    settings: KafkaSettings,
    bootstrap: list[str],
    topic: str,
    partitions: int,
    messages: Iterator[BackupMessage],
) -> int:
    """Send every message to its partition (creating the topic if needed); how many."""
    existing = await partition_count(settings, bootstrap, topic, create_with=partitions)
    existing = existing or partitions
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        max_request_size=16 * 2**20,
        linger_ms=5,
        compression_type=settings.compression_type,
        **aiokafka_options(settings),
    )
    await producer.start()
    sent = 0
    try:
        for message in messages:
            partition = message.partition % existing
            await producer.send(topic, message.value, key=message.key, partition=partition)
            sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent
