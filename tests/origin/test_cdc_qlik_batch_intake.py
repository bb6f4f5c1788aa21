"""A fetch held from arrays (`podd_cdc.qlik_batch_intake.hold_fetch`): how many messages of
each run are held, and how many after them the exact decoder reads before a batch may be
sure again (a run of table descriptions is read exactly as one, not a message a batch)."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

from podd_cdc.cutter import Bounds
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch_intake import MIN_BATCH, hold_fetch
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


def _cutter(decoder: QlikDecoder, schema: LogicalSchema) -> QlikArrayCutter:
    bounds = Bounds(max_rows=10**6, max_pending=10**6)
    return QlikArrayCutter(schema, decoder.by_name.__getitem__, {"t:0": 0}, None, bounds)


def test_descriptions_before_a_runs_data_are_read_exactly_together_then_its_data_held() -> None:
    descriptions, data = _messages()
    schema = _schema(descriptions)
    decoder = QlikDecoder(schema)
    cutter = _cutter(decoder, schema)
    run = [Message(v, k) for k, v in enumerate([*descriptions, *data])]

    assert hold_fetch(decoder, cutter, [("t:0", run)], 0.0, WALL) == {"t:0": (0, len(descriptions))}
    for value in descriptions:  # what the intake's exact reading does with them
        decoder.decode("t", value)
    rest = run[len(descriptions) :]
    assert hold_fetch(decoder, cutter, [("t:0", rest)], 0.0, WALL) == {"t:0": (len(rest), 0)}
    assert cutter.pending == len(data)


def test_a_message_not_sure_of_among_data_is_read_exactly_alone() -> None:
    descriptions, data = _messages()
    schema = _schema(descriptions)
    decoder = QlikDecoder(schema)
    for value in descriptions:
        decoder.decode("t", value)
    cutter = _cutter(decoder, schema)
    broken = [*data[:100], b"{not json", *data[100:]]
    run = [Message(v, k) for k, v in enumerate(broken)]
    assert hold_fetch(decoder, cutter, [("t:0", run)], 0.0, WALL) == {"t:0": (100, 1)}
    assert hold_fetch(decoder, cutter, [("t:0", run[: MIN_BATCH - 1])], 0.0, WALL) == {}
