"""A fetch held from arrays (`podd_cdc.qlik_batch_intake.hold_fetch`): how many messages of
each run are held, and how many after them the exact decoder reads before a batch may be
sure again (a run of table descriptions is read exactly as one, not a message a batch)."""

from __future__ import annotations

import json
from collections import namedtuple
from datetime import UTC, datetime

import numpy as np

from podd_cdc.cutter import Bounds
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch import read_batch
from podd_cdc.qlik_batch_intake import MIN_BATCH, batch_tables, hold_fetch
from podd_cdc.qlik_feed import ReadAt, batch_lines, message_codes
from podd_cdc.transaction_codes import TransactionCodes
from podd_kafka.record_runs import RecordRun
from protocol.schema import LogicalSchema
from tools.cdc_write.qlik_writer import QlikWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import qlik_marketing

Message = namedtuple("Message", "value offset")
WALL = datetime(2030, 1, 1, tzinfo=UTC)
TABLES = qlik_marketing()


def _messages() -> tuple[list[bytes], list[bytes]]:
    """The tables' descriptions, and data messages of enough changes for a batch."""
    db = SourceDatabase(TABLES, seed=3)
    writer = QlikWriter(TABLES, partitions=1, seed=3)
    data: list[bytes] = []
    while len(data) < MIN_BATCH + 100:
        data += [w.value for w in writer.transactions([db.transaction(5)])]
    return [w.value for w in writer.metadata()], data


def _schema(descriptions: list[bytes]) -> LogicalSchema:
    learner = QlikDecoder()
    for value in descriptions:
        learner.decode("t", value)
    return LogicalSchema(datamart="m", tables=tuple(t.table for t in learner.by_name.values()))


def _knowing(schema: LogicalSchema, descriptions: list[bytes]) -> QlikDecoder:
    """The origin's decoder, once it has read the tables' descriptions."""
    decoder = QlikDecoder(schema)
    for value in descriptions:
        decoder.decode("t", value)
    return decoder


def _cutter(decoder: QlikDecoder, schema: LogicalSchema) -> QlikArrayCutter:
    bounds = Bounds(max_rows=10**6, max_pending=10**6)
    return QlikArrayCutter(schema, decoder.by_name.__getitem__, {"t:0": 0}, None, bounds)


def test_descriptions_before_a_runs_data_are_read_exactly_together_then_its_data_held() -> None:
    descriptions, data = _messages()
    schema = _schema(descriptions)
    decoder = QlikDecoder(schema)
    cutter = _cutter(decoder, schema)
    run = RecordRun("t", 0, [Message(v, k) for k, v in enumerate([*descriptions, *data])])

    assert hold_fetch(decoder, cutter, [("t:0", run)], 0.0, WALL) == {"t:0": (0, len(descriptions))}
    for value in descriptions:  # what the intake's exact reading does with them
        decoder.decode("t", value)
    rest = run[len(descriptions) :]
    assert hold_fetch(decoder, cutter, [("t:0", rest)], 0.0, WALL) == {"t:0": (len(rest), 0)}
    assert cutter.pending == len(data)


def test_a_message_not_sure_of_among_data_is_read_exactly_alone() -> None:
    descriptions, data = _messages()
    schema = _schema(descriptions)
    decoder = _knowing(schema, descriptions)
    cutter = _cutter(decoder, schema)
    broken = [*data[:100], b"{not json", *data[100:]]
    run = RecordRun("t", 0, [Message(v, k) for k, v in enumerate(broken)])
    assert hold_fetch(decoder, cutter, [("t:0", run)], 0.0, WALL) == {"t:0": (100, 1)}
    assert hold_fetch(decoder, cutter, [("t:0", run[: MIN_BATCH - 1])], 0.0, WALL) == {}


def _refreshes_with_transaction_ids(count: int) -> list[bytes]:
    """Full-load (REFRESH) rows, each naming a transaction of its own (none should)."""
    db = SourceDatabase(TABLES, seed=5)
    writer = QlikWriter(TABLES, partitions=1, seed=5)
    made = []
    for k, written in enumerate(writer.refresh(db.transaction(count).changes)):
        message = json.loads(written.value)
        message["message"]["headers"]["transactionId"] = f"{k:032X}"
        made.append(json.dumps(message, ensure_ascii=False).encode())
    return made


def test_a_fetchs_transaction_ids_coded_at_once_are_coded_as_table_by_table() -> None:
    descriptions, data = _messages()
    values = [*data, *_refreshes_with_transaction_ids(50)]
    schema = _schema(descriptions)
    decoder = _knowing(schema, descriptions)
    batch = read_batch(values)
    tables = batch_tables(decoder, batch)
    assert len(tables) > 1
    every = np.concatenate([made.messages for _, made in tables])
    read = ReadAt(0, 0, 0.0, 1)
    at_once, one_by_one = TransactionCodes(), TransactionCodes()
    coded = message_codes(batch, every, at_once)
    for _, made in tables:
        lines = np.arange(len(made.messages))
        found = batch_lines(batch, made, lines, read, 0, coded)
        by_table = message_codes(batch, made.messages, one_by_one)
        expected = batch_lines(batch, made, lines, read, 0, by_table)
        assert (found.transaction >= 0).tolist() == (expected.transaction >= 0).tolist()
        assert (found.transaction[found.refresh] == -1).all()
        ids = [at_once._ids.get(c) for c in found.transaction.tolist()]  # the same ids
        assert ids == [one_by_one._ids.get(c) for c in expected.transaction.tolist()]


def test_codes_of_full_load_rows_ids_are_forgotten_once_fed() -> None:
    """A REFRESH row takes no transaction, but its id was looked up with the fetch's: the
    code is forgotten after the feed, or such rows would grow the codes without bound."""
    descriptions, _ = _messages()
    schema = _schema(descriptions)
    decoder = _knowing(schema, descriptions)
    cutter = _cutter(decoder, schema)
    refreshes = _refreshes_with_transaction_ids(MIN_BATCH + 50)
    run = RecordRun("t", 0, [Message(v, k) for k, v in enumerate(refreshes)])
    ((held, _),) = hold_fetch(decoder, cutter, [("t:0", run)], 0.0, WALL).values()
    assert cutter.pending == held > 0
    assert len(cutter.codes) == 0
