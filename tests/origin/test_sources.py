"""The origin's delta sources and gap parsing: pure, no broker."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from origin.errors import OriginError
from origin.session import OriginSession, chunks_missing
from origin.sources import (
    START_DATE,
    DirectorySource,
    SourceDelta,
    WorkloadSource,
    save_deltas,
)
from protocol.body import decode_body
from protocol.body_writer import encode_body
from protocol.framing import frame_delta
from protocol.schema import LogicalSchema, Table
from protocol.workload import Workload, WorkloadSpec

SPEC = WorkloadSpec(rows_per_delta=90, seed=3)


def test_workload_source_is_deterministic_in_any_order(marketing: LogicalSchema) -> None:
    expected = Workload(marketing, SPEC)
    wanted = [expected.next_delta() for _ in range(5)]
    source = WorkloadSource(marketing, SPEC, interval=timedelta(minutes=5))
    for n in (3, 4, 4, 1, 0, 2, 4):  # forward, a repeat, backwards
        delta = source.delta(n)
        assert delta is not None
        assert delta.rows_by_table == wanted[n]
        assert delta.date == START_DATE + n * timedelta(minutes=5)
    assert WorkloadSource(marketing, SPEC, last=2).delta(3) is None


def test_saved_deltas_replay_exactly(marketing: LogicalSchema, tmp_path: Path) -> None:
    source = WorkloadSource(marketing, SPEC)
    deltas = [source.delta(n) for n in range(3)]
    assert save_deltas(tmp_path, marketing, (d for d in deltas if d is not None)) == 3
    replay = DirectorySource(marketing, tmp_path)
    assert replay.numbers == [0, 1, 2]
    for original in deltas:
        assert original is not None
        again = replay.delta(original.num)
        assert again is not None
        assert again.date == original.date
        assert {t: list(r) for t, r in again.rows_by_table.items() if r} == {
            t: list(r) for t, r in original.rows_by_table.items() if r
        }
    assert replay.delta(3) is None


def test_directory_source_refuses_what_it_cannot_replay(
    marketing: LogicalSchema, tmp_path: Path
) -> None:
    with pytest.raises(OriginError, match="no saved delta"):
        DirectorySource(marketing, tmp_path)
    source = WorkloadSource(marketing, SPEC)
    delta = source.delta(0)
    assert delta is not None
    save_deltas(tmp_path, marketing, [delta])
    (tmp_path / "delta-000000" / "sales.avro").write_bytes(b"garbage")
    with pytest.raises(OriginError, match=r"sales\.avro"):
        DirectorySource(marketing, tmp_path).delta(0)
    other = marketing.model_copy(update={"datamart": "elsewhere"})
    with pytest.raises(OriginError, match="delta of marketing, not elsewhere"):
        DirectorySource(other, tmp_path)


def test_gaps_name_the_chunks_to_resend(marketing: LogicalSchema) -> None:
    source = WorkloadSource(marketing, SPEC)
    delta = source.delta(0)
    assert delta is not None
    chunks = list(
        frame_delta(
            marketing,
            request_id="r",
            delta_num=0,
            delta_date=delta.date,
            rows_by_table=delta.rows_by_table,
            chunk_rows=5,
        )
    )
    picked = chunks_missing(chunks, ["missing: stream 1 chunks 2-3; stream 3 last chunk"])
    names = {(c.key.stream_number, c.key.chunk_number) for c in picked}
    stream_3 = {(3, c.key.chunk_number) for c in chunks if c.key.stream_number == 3}
    assert names == {(1, 2), (1, 3)} | stream_3
    assert chunks_missing(chunks, ["nothing we can read"]) == []


def test_a_delta_of_bodies_written_is_framed_of_them_every_time(marketing: LogicalSchema) -> None:
    """A columnar cut's delta holds its chunks' bodies, not rows: every framing, a resend
    that starts over too (removed, LOAD_FAILED), carries them. Before, a resend framed its
    empty `rows_by_table`: the replica would have applied the delta with no rows."""
    rows = WorkloadSource(marketing, SPEC).delta(0)
    assert rows is not None
    written = dict(rows.rows_by_table)

    def bodies(table: Table) -> list[tuple[bytes, int]]:
        mine = [(*r.values, r.sys_op) for r in written.get(table.name, ())]
        return [(encode_body(table, mine), len(mine))]

    delta = SourceDelta(0, rows.date, {}, bodies, written_rows=rows.rows)
    session = OriginSession(None, marketing)  # type: ignore[arg-type]  # framing asks no broker
    framings = [session.frame(delta), session.frame(delta)]
    assert framings[0][0] != framings[1][0]  # a new requestId each time ...
    for _, chunks in framings:  # ... and the same rows
        found = {
            c.key.table_name: [
                tuple(row.values())
                for batch in decode_body(marketing.table(c.key.table_name), c.body)
                for row in batch.to_pylist()
            ]
            for c in chunks
        }
        assert sum(c.rows for c in chunks) == rows.rows > 0
        assert found == {
            t.name: [(*r.values, r.sys_op) for r in written.get(t.name, ())] for t in marketing
        }
