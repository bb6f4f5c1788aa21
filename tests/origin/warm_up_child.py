"""Run by `test_cdc_warm_up` in a child process: the origin's paths of `podd_cdc.warm_up`,
over the test writers' messages (the demo's tables and one of every Qlik type) in place of
the warm-up's own, then the loader's staging (`spark_loader.warm_up`) of the chunks the
origin framed, so the child compiles whatever the two warm-ups did not."""

from __future__ import annotations

from datetime import UTC, datetime

from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_batch_intake import MIN_BATCH
from podd_cdc.warm_up import by_record, dataworks_on_arrays, qlik_on_arrays
from protocol.framing import Chunk
from protocol.schema import LogicalSchema
from spark_loader.warm_up import stage_bodies
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.qlik_writer import QlikWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import dataworks_marketing, qlik_every_type, qlik_marketing


def main() -> None:
    wall = datetime.now(UTC)
    tables = (*qlik_marketing(), qlik_every_type())
    source = SourceDatabase(tables, seed=5)
    qlik = QlikWriter(tables, partitions=1, seed=5)
    data: list[bytes] = []
    while len(data) < MIN_BATCH + 300:
        data += [w.value for w in qlik.transactions([source.transaction(6)])]
    metadata = [w.value for w in qlik.metadata()]
    held = qlik_on_arrays(metadata, data, MIN_BATCH + 200, wall)
    assert held >= MIN_BATCH, held  # most are read on arrays
    _stage(*by_record("qlik", QlikDecoder(), [*metadata, *data], wall))
    tables = dataworks_marketing()
    source = SourceDatabase(tables, seed=5)
    dataworks = DataWorksWriter(tables, partitions=1, one_record_ratio=0.3, seed=5)
    messages = [w.value for w in dataworks.transactions(source.transaction(6) for _ in range(80))]
    held = dataworks_on_arrays(messages, len(messages) - 40, wall)
    assert held >= MIN_BATCH, held
    _stage(*by_record("dataworks", DataWorksDecoder(), messages, wall))
    print("ran", len(data), "Qlik and", len(messages), "DataWorks messages")


def _stage(schema: LogicalSchema, chunks: list[Chunk]) -> None:
    """Each table's chunks staged as the agent's loader stages them."""
    for table in schema:
        bodies = [c.body for c in chunks if c.key.table_name == table.name]
        stage_bodies(table, bodies)


if __name__ == "__main__":
    main()
