"""A delta's rows on columns (`podd_cdc.qlik_delta_rows`) against today's rows
(`podd_cdc.rows.delta_rows`) of the same changes, decoded by the exact decoder: the same
rows, values and order, so the same digest. Keys of an integer, a text and a REAL together,
drawn from small pools so that changes meet on a key (0.0 and -0.0 are one key to Python);
UPDATEs that keep or move their key; DELETEs by `data` or `beforeData`; full-load rows;
copies of a sequence; two partitions; one batch or one a message."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import fastavro
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podd_cdc import qlik_delta_rows
from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.errors import BadInput
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_batch import distinct_texts, read_batch
from podd_cdc.qlik_batch_changes import changes_of
from podd_cdc.qlik_cut import cut_delta
from podd_cdc.qlik_delta_rows import (
    Block,
    TableBlock,
    python_rows_of,
    table_records,
    written,
)
from podd_cdc.qlik_exact_block import ExactBlock
from podd_cdc.qlik_feed import ReadAt, batch_lines, exact_lines, message_codes
from podd_cdc.qlik_held import HeldChanges, QlikHeld
from podd_cdc.records import Change, Position
from podd_cdc.rows import (
    RECORDS_DIGEST,
    digest_as_recorded,
    records_digest,
    rows_digest,
    rows_records_digest,
)
from podd_cdc.transaction_codes import TransactionCodes
from protocol.apply_model import DeltaRow
from protocol.body_writer import record_bodies
from protocol.framing import frame_bodies, frame_delta
from protocol.schema import LogicalSchema
from tests.origin.test_cdc_decode import qlik_metadata

_TYPES = {
    "K": ("INT4", 0, 0, 0, 1),
    "S": ("STRING", 4, 0, 0, 2),
    "R": ("REAL8", 0, 0, 0, 3),
    "V": ("WSTRING", 6, 0, 0, 0),
    "F": ("REAL4", 0, 0, 0, 0),
    "D": ("DATE", 0, 0, 0, 0),
}
_FIRST_SEQUENCE = 20260101000000000000000000000000000
_PARTITIONS = 2

_key = st.fixed_dictionaries(
    {
        "K": st.integers(1, 2),
        "S": st.sampled_from(["a", "b", "ä", "", "ab"]),
        "R": st.sampled_from([0.0, -0.0, 1.5]),
    }
)
_rest = st.fixed_dictionaries(
    {
        "V": st.one_of(st.none(), st.text(max_size=6)),
        "F": st.one_of(st.none(), st.floats(-1e6, 1e6, width=32)),
        "D": st.one_of(st.none(), st.sampled_from(["2024-02-29", "1970-01-01"])),
    }
)
_message = st.tuples(
    st.sampled_from(["INSERT", "UPDATE", "UPDATE", "DELETE", "REFRESH"]),
    _key,
    _rest,
    st.one_of(st.none(), _key),  # UPDATE: the key before (None: no beforeData)
    st.booleans(),  # DELETE: by beforeData (else by data)
    st.integers(0, 12),  # the sequence (a pool, so some are copies)
    st.integers(0, _PARTITIONS - 1),
)

_WALL = datetime(2026, 1, 1, tzinfo=UTC)  # dates a delta none of whose changes is timed


def _written(drawn: tuple[Any, ...]) -> bytes:
    operation, key, rest, before_key, by_before, sequence, _ = drawn
    data: Any = {**key, **rest}
    before: Any = None
    if operation == "UPDATE" and before_key is not None:
        before = {**before_key, **rest}
    if operation == "DELETE" and by_before:
        data, before = None, {**key, **rest}
    headers = {"operation": operation, "changeSequence": str(_FIRST_SEQUENCE + sequence)}
    if sequence % 3:  # the source time goes with the sequence; a third of them have none
        headers["timestamp"] = f"2026-01-01T00:00:{sequence:02d}.5"
    message = {"data": data, "beforeData": before, "headers": headers}
    envelope = {"magic": "atMSG", "type": "DT", "messageSchemaId": "s1", "message": message}
    return json.dumps(envelope, ensure_ascii=False).encode()


def _decoder() -> QlikDecoder:
    decoder = QlikDecoder(fast=False)
    decoder.decode("t", qlik_metadata(_TYPES))
    return decoder


def _both(drawn: list[tuple[Any, ...]], one_batch: bool) -> tuple[Any, Any, int]:
    """The columnar rows and today's rows of a cut of everything."""
    tables, today, taken = _cut(drawn, one_batch)
    return python_rows_of(tables), today, taken


def _cut(drawn: list[tuple[Any, ...]], one_batch: bool) -> tuple[Any, Any, int]:
    """The delta's tables on columns, and today's rows, of a cut of everything, and how
    many changes it took."""
    (made,) = _cuts(drawn, one_batch, 10**9) or [({}, {}, 0)]
    return made


def _cuts(
    drawn: list[tuple[Any, ...]], one_batch: bool, max_rows: int, exact_every: int = 0
) -> list[tuple[Any, Any, int]]:
    """Each delta's tables on columns (`cut_delta`), today's rows (`Cutter.cut` of the exact
    decoder's changes), and how many changes it took, cutting up to `max_rows` at a time
    until nothing is left. Each pair records the same cut: the same spans, bounds, date and
    counts, and a digest of today's rows of the kind the columnar cut records.

    The messages a batch is not sure of, and every `exact_every`-th message (none if 0),
    are held as the exact decoder's changes (`ExactBlock`), beside the rest."""
    decoder = _decoder()
    (table,) = decoder.by_name.values()
    schema = LogicalSchema(datamart="m", tables=(table.table,))
    messages = [_written(d) for d in drawn]
    partitions = [d[-1] for d in drawn]
    offsets, seen = [], [0] * _PARTITIONS
    for p in partitions:
        offsets.append(seen[p])
        seen[p] += 1
    batches = [list(range(len(messages)))] if one_batch else [[m] for m in range(len(messages))]
    blocks: dict[int, Block] = {}
    held = QlikHeld([0] * _PARTITIONS)
    codes = TransactionCodes()
    fed_order: list[int] = []  # the messages held, as fed
    for number, which in enumerate(batches):
        if not which:
            continue
        batch = read_batch([messages[m] for m in which])
        read = np.nonzero(batch.read)[0]
        made = changes_of(batch, table, read, decoder.mask_check("s1"))
        lines = np.nonzero(made.sure)[0]
        if exact_every:
            lines = lines[np.array(which)[made.messages[lines]] % exact_every != 0]
        at = np.array(which, np.int64)[made.messages[lines]]
        blocks[2 * number] = TableBlock(table, batch.out, made)
        read_as = ReadAt(np.array(partitions)[at], np.array(offsets)[at], 0.0, 1)
        coded = message_codes(batch, made.messages[lines], codes)
        sure = batch_lines(batch, made, lines, read_as, 2 * number, coded)
        rest, exact = [], []
        for m in sorted(set(which) - set(at.tolist())):
            try:
                change = decoder.decode("t", messages[m])
            except BadInput:
                continue  # bad input: no change (the origin stops, or sends it aside)
            assert isinstance(change, Change)
            rest.append(m)
            exact.append(change)
        blocks[2 * number + 1] = ExactBlock(table, exact)
        read_as = ReadAt(np.array(partitions)[rest], np.array(offsets)[rest], 0.0, 1)
        others = exact_lines(exact, read_as, 2 * number + 1, codes)
        fed = HeldChanges.joined([sure, others])
        where = np.concatenate([at, np.array(rest, np.int64)])
        for p in range(_PARTITIONS):
            mine = np.nonzero(fed.partition == p)[0]
            in_order = mine[np.argsort(fed.offset[mine], kind="stable")]
            held.feed(fed[in_order])
            fed_order += where[in_order].tolist()
    keys = [partition_key("t", p) for p in range(_PARTITIONS)]
    cutter = Cutter("qlik", schema, dict.fromkeys(keys, 0), None, Bounds(max_rows))
    for m in fed_order:
        change = decoder.decode("t", messages[m])
        assert isinstance(change, Change)
        cutter.feed(Position("t", partitions[m], offsets[m]), change, 0.0, 1, keys[partitions[m]])
    deltas: list[tuple[Any, Any, int]] = []
    last = None
    while True:
        today = cutter.cut(len(deltas), set(keys), 0.0, _WALL, force=True)
        look = held.look(set(range(_PARTITIONS)), max_rows)
        if today is None:
            assert look.count == 0
            return deltas
        found = cut_delta(len(deltas), schema, held, look, blocks, keys, last, _WALL)
        cut, rows = today
        assert replace(found.cut, digest="") == replace(cut, digest="")
        assert found.cut.digest == rows_records_digest(schema, rows)
        deltas.append((found.tables, rows, found.cut.changes))
        last = found.cut


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, max_size=25), st.booleans())
def test_the_rows_are_todays_rows_in_todays_order(drawn: list[Any], one_batch: bool) -> None:
    columnar, today, _ = _both(drawn, one_batch)
    assert columnar == today
    assert rows_digest(columnar) == rows_digest(today)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, max_size=25), st.booleans(), st.integers(1, 4), st.integers(0, 3))
def test_deltas_of_a_few_changes_each_are_todays(
    drawn: list[Any], one_batch: bool, max_rows: int, exact_every: int
) -> None:
    """Cut a few changes at a time, each delta follows the last (its spans, its previous
    bound, its date) as today's does, and has today's rows; also with some changes, or
    all (`exact_every` 1), held as the exact decoder made them."""
    deltas = _cuts(drawn, one_batch, max_rows, exact_every)
    for tables, today, _ in deltas:
        assert python_rows_of(tables) == today
    assert sum(taken for _, _, taken in deltas) <= len(drawn)


def test_a_delta_of_many_meetings_on_keys() -> None:
    """Named: every kind of change meets the others on few keys, so the test is not vacuous
    (most changes are taken; rows are superseded, moved and deleted)."""
    key = {"K": 1, "S": "ä", "R": 0.0}
    other = {"K": 1, "S": "ä", "R": -0.0}  # the same key to Python
    moved = {"K": 2, "S": "ab", "R": 1.5}
    rest = {"V": "x", "F": 0.5, "D": None}
    drawn = [
        ("REFRESH", key, rest, None, False, 0, 0),
        ("INSERT", moved, rest, None, False, 1, 1),
        ("UPDATE", key, {**rest, "V": "y"}, other, False, 2, 0),
        ("UPDATE", moved, rest, key, False, 3, 1),  # moves `key` to `moved`
        ("INSERT", key, rest, None, False, 3, 0),  # a copy of sequence 3: dropped
        ("DELETE", moved, rest, None, True, 4, 0),
        ("INSERT", other, {**rest, "V": "z"}, None, False, 5, 1),
    ]
    columnar, today, taken = _both(drawn, one_batch=False)
    assert taken == 6
    assert columnar == today
    ((deleted, kept),) = list(columnar.values())
    assert (deleted.values[:3], deleted.sys_op) == ((2, "ab", 1.5), 1)
    assert (kept.values[3], kept.sys_op) == ("z", 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, min_size=5, max_size=25))
def test_text_keys_whose_hashes_collide_are_told_apart_by_their_bytes(
    drawn: list[Any],
) -> None:
    """Every text key's hash forced to one value: keys are then told apart by their bytes."""
    with mock.patch.object(qlik_delta_rows, "distinct_texts", _one_hash):
        columnar, today, _ = _both(drawn, one_batch=True)
    assert columnar == today


def _one_hash(out: Any, starts: Any, ends: Any, keys: Any = None) -> Any:
    return distinct_texts(out, starts, ends, np.zeros(len(starts), np.int64))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, max_size=25), st.integers(1, 4), st.sampled_from(["null", "deflate"]))
def test_the_chunks_are_todays_chunks(drawn: list[Any], chunk_rows: int, codec: Any) -> None:
    """Framed from the columns (`frame_bodies` over `table_records`), a delta's chunks have
    the keys and hold the records that `frame_delta` makes of today's rows (a FLOAT written
    as a float, from the double the column holds); and the digest of the records is the
    one Python rows give."""
    tables, today, _ = _cut(drawn, one_batch=True)
    schema = LogicalSchema(datamart="m", tables=tuple(t.table for t in tables.values()))
    records = {name: written(*table_records(t)) for name, t in tables.items()}
    assert records_digest(records) == rows_records_digest(schema, today)
    head: dict[str, Any] = {"request_id": "r", "delta_num": 1, "delta_date": datetime(2026, 1, 1)}
    columnar = list(
        frame_bodies(
            schema,
            **head,
            bodies=lambda t: record_bodies(
                t, *table_records(tables[t.name]), chunk_rows=chunk_rows, codec=codec
            ),
        )
    )
    framed = list(
        frame_delta(schema, **head, rows_by_table=today, chunk_rows=chunk_rows, codec=codec)
    )
    assert [(c.key, c.rows) for c in columnar] == [(c.key, c.rows) for c in framed]
    assert [_records(c.body) for c in columnar] == [_records(c.body) for c in framed]


def _records(body: bytes) -> list[Any]:
    return list(fastavro.reader(io.BytesIO(body)))


def test_a_recorded_digest_is_checked_by_its_own_kind() -> None:
    """A rebuild compares its rows with the digest a cut recorded: `rows_digest`'s (cut
    records made by today's path) or the records digest (the columnar path's), and a row
    that differs fails either."""
    key, rest = {"K": 1, "S": "ä", "R": 0.0}, {"V": "x", "F": 0.5, "D": "2024-02-29"}
    drawn = [("INSERT", key, rest, None, False, 1, 0), ("DELETE", key, rest, None, True, 2, 1)]
    drawn.append(("INSERT", {**key, "K": 2}, rest, None, False, 3, 0))
    tables, today, _ = _cut(drawn, one_batch=True)
    schema = LogicalSchema(datamart="m", tables=tuple(t.table for t in tables.values()))
    columnar = records_digest({n: written(*table_records(t)) for n, t in tables.items()})
    assert columnar.startswith(RECORDS_DIGEST)
    changed = {n: [DeltaRow(r.values, 1 - r.sys_op) for r in rows] for n, rows in today.items()}
    for recorded in (rows_digest(today), columnar):
        assert digest_as_recorded(recorded, schema, today) == recorded
        assert digest_as_recorded(recorded, schema, changed) != recorded
