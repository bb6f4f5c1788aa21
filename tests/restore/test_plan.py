"""The pure planning of a restore: increments, completeness, duplicates, runs, gaps."""

from __future__ import annotations

from datetime import UTC, datetime

from origin.sources import WorkloadSource
from podd_restore.plan import BackupChunk, BackupIndex, Place
from podd_restore.runner import needs_spark
from podd_restore.topic_index import TopicIndex
from protocol.backup import BackupKey, BackupMessageType
from protocol.backup_writer import BackupMessage
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from tools.backup_topic import BackupLayout, incremental

DATE = datetime(2026, 1, 1, tzinfo=UTC)
_offsets = iter(range(10**6))


def chunk(
    delta: int,
    stream: int,
    number: int,
    last: bool,
    *,
    run: str = "r1",
    total: int = 2,
    datamart: str = "m",
    table: str | None = "t",
) -> BackupChunk:
    key = BackupKey(
        increment_id=run,
        message_type=BackupMessageType.TABLE_DATA,
        datamart=datamart,
        delta_num=delta,
        delta_date=DATE,
        table_name=table,
        stream_number=stream,
        stream_total=total,
        chunk_number=number,
        is_last_chunk=last,
    )
    return BackupChunk(key, Place("t", 0, next(_offsets)), 10)


def complete(index: BackupIndex, delta: int, run: str = "r1") -> None:
    for c in (
        chunk(delta, 1, 1, False, run=run),
        chunk(delta, 1, 2, True, run=run),
        chunk(delta, 2, 1, True, run=run),
    ):
        index.add(c)


def test_an_increment_is_complete_with_every_streams_last_chunk_and_all_below() -> None:
    index = BackupIndex("m")
    index.add(chunk(0, 1, 2, True))
    index.add(chunk(0, 2, 1, True))
    plan = index.delta(0)
    assert plan.chosen is None
    assert plan.refusal == "no complete increment: run r1 lacks stream 1 chunks 1-1"
    index.add(chunk(0, 1, 1, False))
    index.add(chunk(0, 1, 1, False))  # a writer's retry
    assert index.delta(0).chosen is not None
    assert index.increments[("r1", 0)].duplicates == 1


def test_the_latest_complete_run_of_a_delta_is_used_and_gaps_stop_the_plan() -> None:
    index = BackupIndex("m")
    for delta in (0, 1, 2, 4):
        complete(index, delta)
    complete(index, 1, run="r2")  # written again later
    index.add(chunk(2, 1, 1, False, run="r3"))  # an incomplete third run
    plans, stop = index.restorable(0)
    assert [(p.delta_num, p.chosen.increment_id) for p in plans] == [  # type: ignore[union-attr]
        (0, "r1"),
        (1, "r2"),
        (2, "r1"),
    ]
    assert stop is not None
    assert (stop.delta_num, stop.refusal) == (3, "no increment of it is in the topic")
    assert index.restorable(4)[0][0].delta_num == 4
    assert index.restorable(1, to_delta=1)[1] is None


def test_delta_zero_from_two_runs_needs_a_named_run() -> None:
    index = BackupIndex("m")
    complete(index, 0, run="snap-a")
    complete(index, 0, run="snap-b")
    refused = index.delta(0)
    assert refused.chosen is None
    assert "written by 2 runs" in (refused.refusal or "")
    assert index.delta(0, increment_id="snap-a").chosen.increment_id == "snap-a"  # type: ignore[union-attr]


def test_other_datamarts_are_counted_not_indexed_and_inconsistent_chunks_are_problems() -> None:
    index = BackupIndex("m")
    index.add(chunk(0, 1, 1, True, datamart="other", total=1))
    assert index.other_datamarts == {"other": 1}
    assert index.increments == {}
    index.add(chunk(0, 1, 1, True, total=1))
    index.add(chunk(0, 3, 1, True, total=1))  # stream 3 of 1
    assert index.delta(0).chosen is None
    assert "out of range" in (index.delta(0).refusal or "")


def test_what_a_hostile_key_claims_drives_no_loop() -> None:
    index = BackupIndex("m")
    index.add(chunk(0, 1, 1, True, total=2**62))  # a stream total no writer has
    index.add(chunk(2**62, 1, 2**62, True, total=1))  # a far delta and chunk number
    assert "streamTotal" in (index.delta(0).refusal or "")
    plans, stop = index.restorable(0)
    assert plans == []
    assert stop is not None
    assert stop.delta_num == 0
    for n in range(200):
        index.add(chunk(0, 1, 1, True, datamart=f"other-{n}", total=1))
    assert len(index.other_datamarts) == 101  # 100 by name, the rest together


def _indexed(topic_index: TopicIndex, messages: list[BackupMessage]) -> None:
    for offset, message in enumerate(messages):
        topic_index.on_message(Place("t", message.partition, offset), message.key, message.value)


def test_changelog_records_are_capped_for_all_runs_together(marketing: LogicalSchema) -> None:
    """Each changelog message was capped, the topic's sum was not: a topic of many runs
    could make a restore hold every schema change it ever saw."""
    source = WorkloadSource(marketing, WorkloadSpec(rows_per_delta=5, seed=1))
    layout = BackupLayout(threads=1, partitions=1, chunk_rows=50)
    runs = [list(incremental(source, [0], layout, f"run-{n}")) for n in range(3)]
    topic_index = TopicIndex(
        marketing.datamart,
        BackupIndex(marketing.datamart),
        max_changelog_records=2 * len(marketing.tables),
    )
    for run in runs:
        _indexed(topic_index, run)
    assert topic_index.changelog_records == 2 * len(marketing.tables)
    problems = [p for i in topic_index.index.increments.values() for p in i.problems]
    assert len(problems) == 1
    assert "for all runs together" in problems[0]


def test_spark_is_started_ahead_only_for_a_run_with_a_delta_beyond_the_driver_bound() -> None:
    index = BackupIndex("m")
    complete(index, 0)  # three bodies of 10 bytes
    plans, _ = index.restorable(0)
    chosen = [p.chosen for p in plans if p.chosen is not None]
    assert not needs_spark(chosen, 30 / 2**20)
    assert needs_spark(chosen, 29 / 2**20)
    assert needs_spark(chosen, 0)


def test_complete_increments_of_one_delta_that_differ_are_never_chosen_between() -> None:
    def rerun(run: str, digest: bytes) -> None:
        for c in (
            chunk(1, 1, 1, False, run=run),
            chunk(1, 1, 2, True, run=run),
            chunk(1, 2, 1, True, run=run),
        ):
            index.add(BackupChunk(c.key, c.place, c.size, digest=digest))

    index = BackupIndex("m")
    rerun("r1", b"same")
    rerun("r2", b"same")  # a writer's re-run: the same content
    assert index.delta(1).chosen.increment_id == "r2"  # type: ignore[union-attr]
    rerun("r3", b"other")  # appended with other rows
    refused = index.delta(1)
    assert refused.chosen is None
    assert "delta 1 is in 3 complete increments that differ" in (refused.refusal or "")
    assert "run r3 dated" in (refused.refusal or "")
    assert index.delta(1, increment_id="r1").chosen.increment_id == "r1"  # type: ignore[union-attr]
