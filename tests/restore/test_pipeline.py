"""A run's data read again by place, one delta ahead of the apply (`podd_restore.pipeline`),
on the test broker: each delta's bodies staged exactly as written, with what they
decompress to, at most two deltas staged at once, and bounds that name their setting."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from origin.sources import WorkloadSource
from podd_kafka.settings import KafkaSettings
from podd_restore.errors import RestoreError
from podd_restore.pipeline import DeltaFetcher
from podd_restore.plan import BackupIndex, Increment
from podd_restore.restore_staging import RestoreStaging
from podd_restore.scan import scan_topic
from podd_restore.topic_index import TopicIndex
from protocol.backup import BackupKey
from protocol.backup_writer import BackupMessage
from protocol.codec import decode_message
from protocol.ocf import OcfLimits, decoded_size
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from tests.restore.conftest import renamed, with_duplicates, write_topic
from tools.backup_topic import BackupLayout, incremental

DELTAS = 4


def written(
    broker: str, topic: str, schema: LogicalSchema
) -> tuple[list[Increment], list[BackupMessage]]:
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=300, seed=41))
    messages = list(incremental(source, range(DELTAS), BackupLayout(2, 3, 40), "run-1"))
    write_topic(broker, topic, 3, with_duplicates(messages, 0.2))
    index = TopicIndex(schema.datamart, BackupIndex(schema.datamart))
    asyncio.run(scan_topic(KafkaSettings(), [broker], topic, index.on_message))
    plans, stop = index.index.restorable(0)
    assert stop is None or stop.delta_num == DELTAS
    chosen = [p.chosen for p in plans if p.chosen is not None]
    assert [i.delta_num for i in chosen] == list(range(DELTAS))
    return chosen, messages


def fetcher(
    broker: str, increments: list[Increment], staging: RestoreStaging, max_bytes: int = 2**30
) -> DeltaFetcher:
    return DeltaFetcher(
        KafkaSettings(),
        [broker],
        increments,
        staging,
        body_limits=OcfLimits(),
        max_delta_bytes=max_bytes,
        stall_timeout=30,
    )


def test_each_delta_is_staged_as_written_one_delta_ahead(
    broker: str, topic: str, marketing: LogicalSchema, tmp_path: Path
) -> None:
    schema = renamed(marketing)
    increments, messages = written(broker, topic, schema)
    bodies = {
        (k.delta_num, k.stream_number, k.chunk_number): m.value
        for m in messages
        if m.table_name is not None and (k := decode_message(BackupKey, m.key))
    }
    staging = RestoreStaging(tmp_path, schema.datamart)
    sizes = []
    with fetcher(broker, increments, staging) as deltas:
        for expected in range(DELTAS):
            increment = deltas.next()
            assert increment.delta_num == expected
            data = [c for c in increment.chunks.values() if c.key.table_name is not None]
            assert data
            for chunk in data:
                assert chunk.path is not None
                body = Path(chunk.path).read_bytes()
                key = chunk.key
                assert body == bodies[(key.delta_num, key.stream_number, key.chunk_number)]
                assert chunk.decoded == (decoded_size(body, OcfLimits()) if body else 0)
            sizes.append(sum(c.size for c in data))
            deltas.applied(increment)
            assert not any(Path(c.path).exists() for c in data if c.path)
        assert 0 < deltas.peak_staged_bytes <= max(a + b for a, b in itertools.pairwise(sizes))


def test_a_delta_larger_than_the_bound_stops_the_run_naming_the_setting(
    broker: str, topic: str, marketing: LogicalSchema, tmp_path: Path
) -> None:
    schema = renamed(marketing)
    increments, _ = written(broker, topic, schema)
    with (
        fetcher(broker, increments, RestoreStaging(tmp_path, schema.datamart), 1000) as deltas,
        pytest.raises(RestoreError, match="PODD_RESTORE_MAX_STAGED_MIB"),
    ):
        deltas.next()
