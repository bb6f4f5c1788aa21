"""What the CDC origin holds is bounded in bytes and table descriptions, and its catalog
grows by a line per description: pure, no Kafka."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from podd_cdc import qlik
from podd_cdc.catalog import CATALOG, LEGACY_CATALOG, QlikCatalog
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.errors import BadInput
from podd_cdc.intake import Handoff, Intake
from podd_cdc.options import CdcOptions, CdcStats
from podd_cdc.qlik import QlikDecoder
from podd_cdc.records import Position, TableSeen
from tests.origin.test_cdc_cutter import P0, P1, SCHEMA
from tests.origin.test_cdc_cutter import qlik as qlik_change
from tests.origin.test_cdc_decode import dataworks, qlik_metadata


def test_the_cutter_is_full_at_its_bytes_bound_before_its_count() -> None:
    """500,000 changes of 1 MiB each were held: the bound counted changes only."""
    bounds = Bounds(max_pending=1000, max_pending_bytes=3 << 20)
    cutter = Cutter("qlik", SCHEMA, {P0: 0, P1: 0}, None, bounds)
    for n in range(1, 4):
        assert not cutter.full
        cutter.feed(Position("cdc", 0, n), qlik_change(n, n, "T", n, n == 3), 0.0, 1 << 20)
    assert cutter.full
    assert cutter.pending == 3
    found = cutter.cut(0, {P0, P1}, 0.0, datetime(2026, 1, 1), force=True)
    assert found is not None
    assert (cutter.pending, cutter.pending_bytes, cutter.full) == (0, 0, False)


def test_table_descriptions_beyond_the_cap_are_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qlik, "MAX_TABLE_VERSIONS", 5)
    decoder = QlikDecoder()
    columns = {"K": ("INT4", 0, 0, 0, 1)}
    for n in range(5):
        decoder.decode("t", qlik_metadata(columns, schema_id=f"s{n}"))
    decoder.decode("t", qlik_metadata(columns, schema_id="s4"))  # known: no new entry
    with pytest.raises(BadInput, match="more than 5 table descriptions"):
        decoder.decode("t", qlik_metadata(columns, schema_id="s5"))


def test_the_catalog_appends_a_line_per_new_description(tmp_path: Path) -> None:
    catalog = QlikCatalog(tmp_path)
    messages = [{"schemaId": f"s{n}", "lineage": {"table": "t"}} for n in range(50)]
    sizes = []
    for message in messages:
        catalog.add(message)
        catalog.add(message)  # seen again: not written again
        sizes.append((tmp_path / CATALOG).stat().st_size)
    steps = {b - a for a, b in itertools.pairwise(sizes)}
    assert max(steps) < 100  # a line each, never the whole catalog again
    assert QlikCatalog(tmp_path).messages == messages


def test_the_catalog_reads_an_earlier_versions_file_and_skips_a_line_cut_short(
    tmp_path: Path,
) -> None:
    old = [{"schemaId": "a"}, {"schemaId": "b"}]
    (tmp_path / LEGACY_CATALOG).write_text(json.dumps(old))
    (tmp_path / CATALOG).write_text('{"schemaId": "b"}\n{"schemaId": "c"}\n{"schemaId": ')
    assert QlikCatalog(tmp_path).messages == [*old, {"schemaId": "c"}]


@pytest.mark.parametrize("millis", [253_402_300_800_000, 9 * 10**18])
def test_a_dataworks_event_time_past_year_9999_is_bad_input_not_a_crash(millis: int) -> None:
    """It raised OverflowError from the time conversion: outside bad input, so the reader
    died, and at every restart on the same offset."""
    decoder = DataWorksDecoder()
    beat = json.dumps({"payload": {"op": "MHEARTBEAT", "timestamp": {"eventTime": millis}}})
    with pytest.raises(BadInput, match="out of range"):
        decoder.decode("t", beat.encode())
    row = {"id": 1, "at": 1_700_000_000_123, "raw": "AAE="}
    message = json.loads(dataworks("INSERT", after=row, key=["id"]))
    message["payload"]["timestamp"]["eventTime"] = millis
    with pytest.raises(BadInput, match="out of range"):
        decoder.decode("t", json.dumps(message).encode())


class _Quiet:
    """A reader as the intake's read-ahead rule sees it: no partition quiet."""

    def quiet(self) -> set[str]:
        return set()


def _read_ahead(tmp_path: Path) -> tuple[Intake, Cutter]:
    """A Qlik intake and cutter over two partitions: deltas of 2, a settle time of 0.2 s."""
    options = CdcOptions(
        fmt="qlik", topics=["cdc"], state_dir=tmp_path, bounds=Bounds(max_rows=2), settle=0.2
    )
    intake = Intake(options, SCHEMA, None, CdcStats())  # type: ignore[arg-type]
    return intake, Cutter("qlik", SCHEMA, {P0: 0, P1: 0}, None, options.bounds)


def test_partitions_are_held_back_only_while_the_bound_moves(tmp_path: Path) -> None:
    """A partition that delivers messages but never a key past its last one (each bad, sent
    to the dead-letter topic) must not keep the others unread for ever: once the bound has
    stood still for the settle time, every partition is read again (and the run stops at
    `max_pending`, naming what it holds, as without the rule)."""
    intake, cutter = _read_ahead(tmp_path)
    reader: Any = _Quiet()
    cutter.feed(Position("cdc", 0, 0), qlik_change(1, 1), 0.0)
    assert intake._held_back(reader, cutter) == set()  # less than a delta's worth held
    cutter.feed(Position("cdc", 0, 1), qlik_change(5, 5), 0.0)
    cutter.feed(Position("cdc", 1, 0), qlik_change(2, 2), 0.0)
    assert intake._held_back(reader, cutter) == {P0}  # P1 holds the bound at 2
    time.sleep(0.25)
    assert intake._held_back(reader, cutter) == set()  # ... and has for the settle time
    cutter.feed(Position("cdc", 1, 1), qlik_change(3, 3), 0.0)
    assert intake._held_back(reader, cutter) == {P0}  # the bound moved: held back again


def test_time_spent_waiting_for_a_send_is_not_the_bound_standing_still(tmp_path: Path) -> None:
    """While a cut delta waits to be sent and the next one's worth is held, reading waits;
    an agent slower than the settle time must not make the bound look stuck once reading
    resumes (every partition would be read ahead of it)."""
    intake, cutter = _read_ahead(tmp_path)
    reader: Any = _Quiet()
    handoff = Handoff()
    cutter.feed(Position("cdc", 0, 0), qlik_change(5, 5), 0.0)
    cutter.feed(Position("cdc", 1, 0), qlik_change(2, 2), 0.0)
    assert not intake._must_wait(cutter, handoff)
    assert intake._held_back(reader, cutter) == {P0}
    handoff.delta_waiting.set()
    assert intake._must_wait(cutter, handoff)
    time.sleep(0.25)  # the send takes longer than the settle time
    handoff.delta_waiting.clear()
    assert not intake._must_wait(cutter, handoff)
    assert intake._held_back(reader, cutter) == {P0}  # still held back: nothing was read


class _Pausing(_Quiet):
    """A reader that records which partitions were paused and read again."""

    def __init__(self) -> None:
        self.paused: set[str] = set()

    def pause(self, key: str, offset: int) -> None:
        self.paused.add(key)

    def resume(self, key: str) -> None:
        self.paused.discard(key)

    def is_paused(self, key: str) -> bool:
        return key in self.paused


def test_a_partition_read_again_for_its_metadata_holds_the_others_back(tmp_path: Path) -> None:
    """While a partition waits for a table's metadata, which any partition may carry, none is
    held back. Once metadata arrives it is read again, and until its next fetch comes the
    others are held back (one run read 9,000 changes of three partitions meanwhile); if its
    message needs another table, it waits for metadata again, on the same clock."""
    intake, cutter = _read_ahead(tmp_path)
    reader: Any = _Pausing()
    cutter.feed(Position("cdc", 0, 0), qlik_change(1, 1), 0.0)
    cutter.feed(Position("cdc", 0, 1), qlik_change(5, 5), 0.0)
    intake._await_metadata(reader, P1, 0)  # P1's first message: a table not yet described
    since = intake.waiting[P1][1]
    assert intake._held_back(reader, cutter) == set()
    seen = QlikDecoder().decode("t", qlik_metadata({"K": ("INT4", 0, 0, 0, 1)}))
    assert isinstance(seen, TableSeen)
    intake._remember(seen, reader)
    assert reader.paused == set()
    assert intake._held_back(reader, cutter) == {P0}  # P1, with no key yet, holds the bound
    intake._await_metadata(reader, P1, 0)  # ... and its message was of another table
    assert intake._held_back(reader, cutter) == set()
    assert intake.waiting[P1] == (0, since)


async def test_the_runner_looks_before_the_intake_reads_its_next_batch() -> None:
    """`Handoff.next_batch` returns as soon as a batch is fed, before the feeding task's next
    step: otherwise the intake reads on while the runner sleeps, and holds more than the
    next delta's worth."""
    handoff = Handoff()
    steps: list[str] = []

    async def intake() -> None:
        for n in range(3):
            steps.append(f"batch {n}")
            handoff.fed.set()
            await asyncio.sleep(0)

    async def runner() -> None:
        for _ in range(3):
            await handoff.next_batch(5)
            steps.append("look")

    await asyncio.gather(runner(), intake())
    assert steps == ["batch 0", "look", "batch 1", "look", "batch 2", "look"]
    started = time.monotonic()
    await handoff.next_batch(0.05)  # nothing fed: the tick
    assert 0.04 <= time.monotonic() - started < 1


class _Counting(_Quiet):
    """A reader that hands out no records and counts the fetches it was asked for."""

    def __init__(self) -> None:
        self.asked = 0

    async def added(self) -> dict[str, int]:
        return {}

    async def runs(self, held_back: object = ()) -> list[Any]:
        self.asked += 1
        await asyncio.sleep(0.001)
        return []


async def test_the_intake_reads_no_batch_while_a_deltas_chunks_are_produced(
    tmp_path: Path,
) -> None:
    """The producer's sender shares the event loop with the intake: a delta's chunks are
    produced before the intake reads on (`Handoff.chunks_out`), and reading resumes once
    they are on the broker."""
    intake, cutter = _read_ahead(tmp_path)
    reader = _Counting()
    handoff = Handoff()
    handoff.chunks_out.clear()  # the runner began producing a delta's chunks
    reading = asyncio.create_task(intake.run(reader, cutter, handoff))  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.1)
        assert reader.asked == 0
        handoff.chunks_out.set()  # on the broker
        await asyncio.sleep(0.1)
        assert reader.asked > 0
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
