"""What the CDC origin holds is bounded in bytes and table descriptions, and its catalog
grows by a line per description: pure, no Kafka."""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from pathlib import Path

import pytest

from podd_cdc import qlik
from podd_cdc.catalog import CATALOG, LEGACY_CATALOG, QlikCatalog
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.errors import BadInput
from podd_cdc.qlik import QlikDecoder
from podd_cdc.records import Position
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
