"""`podd-cdc schema`: the replica's Prostore DDL, derived from what a topic says of its
tables (Qlik metadata messages; DataWorks `schema` objects), read to the topic's end."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from podd_cdc.errors import AwaitingMetadata, BadInput, TableRefused
from podd_cdc.intake import make_decoder
from podd_cdc.options import CdcOptions
from podd_cdc.topic_reader import TopicReader
from podd_kafka.settings import KafkaSettings
from protocol.schema import LogicalSchema, Table


@dataclass
class ScanResult:
    tables: dict[str, Table] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # why, by where
    messages: int = 0

    def schema(self, datamart: str) -> LogicalSchema:
        return LogicalSchema(datamart=datamart, tables=tuple(self.tables.values()))


async def scan(
    settings: KafkaSettings, bootstrap: list[str], options: CdcOptions, timeout: float = 600
) -> ScanResult:
    """Read every partition of the topics from its start until all are quiet."""
    decoder = make_decoder(options, None, catalog=False)
    reader = TopicReader(settings, bootstrap, options.settle)
    found = ScanResult()
    keys = await reader.start(options.topics)
    try:
        for key, offset in (await reader.first_offsets(latest=False)).items():
            reader.seek(key, offset)
        deadline = time.monotonic() + timeout
        while reader.quiet() < set(keys) and time.monotonic() < deadline:
            for message in await reader.batch():
                found.messages += 1
                try:
                    decoder.decode(message.topic, message.value)
                except TableRefused as exc:
                    where = f"{message.topic}:{message.partition}:{message.offset}"
                    found.refused.setdefault(exc.reason, where)
                except (BadInput, AwaitingMetadata):
                    continue  # only what a message says of its table counts here
            await asyncio.sleep(0)
    finally:
        await reader.stop()
    for table in decoder.by_name.values():
        found.tables[table.name] = table.table
    return found
