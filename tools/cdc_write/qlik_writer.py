"""Qlik Replicate's Kafka target, as the writer of a test or demo topic.

Metadata messages first (one per table, partition 0), full-load `REFRESH` rows, then each
transaction's changes with Qlik's headers: `changeSequence` (16 digits of commit time, then a
19-digit change number), `transactionId`, `transactionEventCounter` from 1 and
`transactionLastEvent`. A change goes to the partition of its table and key, so one
transaction spreads over partitions; each partition stays in sequence order. With
`duplicate_ratio`, some messages are written twice, as a producer retry would.
"""

from __future__ import annotations

import io
import json
import random
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import fastavro

from tools.cdc_write.source import SourceChange, SourceTable, SourceTransaction
from tools.cdc_write.wire import qlik_avro, qlik_avro_type, qlik_json

_ENVELOPE = fastavro.parse_schema(
    {
        "type": "record",
        "name": "MessageEnvelope",
        "fields": [
            {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
            {"name": "type", "type": "string"},
            {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
            {"name": "messageSchemaId", "type": ["null", "string"]},
            {"name": "messageSchema", "type": ["null", "string"]},
            {"name": "message", "type": "bytes"},
        ],
    }
)
_METADATA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "MetadataMessage",
        "fields": [
            {"name": "schemaId", "type": "string"},
            {
                "name": "lineage",
                "type": {
                    "type": "record",
                    "name": "Lineage",
                    "fields": [
                        {"name": "server", "type": "string"},
                        {"name": "task", "type": "string"},
                        {"name": "schema", "type": "string"},
                        {"name": "table", "type": "string"},
                        {"name": "tableVersion", "type": "int"},
                        {"name": "timestamp", "type": "string"},
                    ],
                },
            },
            {
                "name": "tableStructure",
                "type": {
                    "type": "record",
                    "name": "TableStructure",
                    "fields": [
                        {
                            "name": "tableColumns",
                            "type": {
                                "type": "map",
                                "values": {
                                    "type": "record",
                                    "name": "TableColumn",
                                    "fields": [
                                        {"name": "ordinal", "type": "int"},
                                        {"name": "type", "type": "string"},
                                        {"name": "length", "type": "int"},
                                        {"name": "precision", "type": "int"},
                                        {"name": "scale", "type": "int"},
                                        {"name": "primaryKeyPosition", "type": "int"},
                                    ],
                                },
                            },
                        }
                    ],
                },
            },
            {"name": "dataSchema", "type": "string"},
        ],
    }
)


@dataclass(frozen=True)
class Written:
    """One message to produce; `change` and `sequence` say what it carries, for the model."""

    partition: int
    key: bytes | None
    value: bytes
    change: SourceChange | None = None
    sequence: str | None = None  # changeSequence (DataWorks: sequenceId); None: no change
    transaction: int | None = None  # Qlik: the transaction's number
    op: str | None = None  # the operation as written (Qlik's, or DataWorks' op)


def partition_of(table: str, key: Iterable[Any], partitions: int) -> int:
    return zlib.crc32(repr((table, tuple(key))).encode()) % partitions


class QlikWriter:
    def __init__(
        self,
        tables: Iterable[SourceTable],
        *,
        encoding: Literal["json", "avro"] = "json",
        envelope: bool = True,
        partitions: int = 4,
        duplicate_ratio: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.tables = {t.name: t for t in tables}
        self.encoding = encoding
        self.envelope = envelope
        self.partitions = partitions
        self.duplicate_ratio = duplicate_ratio
        self.rng = random.Random(seed)  # noqa: S311 - a seeded workload, not a secret
        self._change_number = 0
        self._parsed: dict[str, Any] = {}
        if encoding == "avro" and not envelope:
            raise ValueError("Avro data messages without the envelope need a schema registry")

    # --- metadata ---------------------------------------------------------------------
    def schema_id(self, table: SourceTable, version: int = 1) -> str:
        return f"{table.name}-v{version}-{zlib.crc32(table.name.encode()):08x}"

    def data_schema(self, table: SourceTable) -> dict[str, Any]:
        row = {
            "type": "record",
            "name": f"{table.name}_data",
            "fields": [
                {"name": c.name, "type": ["null", qlik_avro_type(c)]} for c in table.columns
            ],
        }
        headers = {
            "type": "record",
            "name": "Headers",
            "fields": [
                {
                    "name": "operation",
                    "type": {
                        "type": "enum",
                        "name": "operation",
                        "symbols": ["INSERT", "UPDATE", "DELETE", "REFRESH"],
                    },
                },
                {"name": "changeSequence", "type": "string"},
                {"name": "timestamp", "type": "string"},
                {"name": "streamPosition", "type": "string"},
                {"name": "transactionId", "type": "string"},
                {"name": "changeMask", "type": ["null", "bytes"]},
                {"name": "columnMask", "type": ["null", "bytes"]},
                {"name": "transactionEventCounter", "type": ["null", "long"]},
                {"name": "transactionLastEvent", "type": ["null", "boolean"]},
            ],
        }
        return {
            "type": "record",
            "name": "DataRecord",
            "fields": [
                {"name": "data", "type": ["null", row]},
                {"name": "beforeData", "type": ["null", f"{table.name}_data"]},
                {"name": "headers", "type": headers},
            ],
        }

    def metadata_message(self, table: SourceTable, version: int = 1) -> dict[str, Any]:
        columns = {
            c.name: {
                "ordinal": i,
                "type": c.type,
                "length": c.length or 0,
                "precision": c.precision or 0,
                "scale": c.scale or 0,
                "primaryKeyPosition": table.key.index(c.name) + 1 if c.name in table.key else 0,
            }
            for i, c in enumerate(table.columns, start=1)
        }
        return {
            "schemaId": self.schema_id(table, version),
            "lineage": {
                "server": "source-db",
                "task": "podd-test",
                "schema": "dbo",
                "table": table.name.upper(),
                "tableVersion": version,
                "timestamp": "2026-01-01T00:00:00.000",
            },
            "tableStructure": {"tableColumns": columns},
            "dataSchema": json.dumps(self.data_schema(table)),
        }

    def metadata(self, version: int = 1) -> list[Written]:
        return [
            Written(
                0,
                table.name.encode(),
                self._wrap("MD", None, self.metadata_message(table, version)),
            )
            for table in self.tables.values()
        ]

    # --- data -------------------------------------------------------------------------
    def refresh(self, changes: Iterable[SourceChange]) -> list[Written]:
        return [self._written(c, "REFRESH", None, {}) for c in changes]

    def transactions(self, transactions: Iterable[SourceTransaction]) -> Iterator[Written]:
        for tx in transactions:
            when = datetime.fromtimestamp(tx.commit_ms / 1000, UTC)
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
            for counter, change in enumerate(tx.changes, start=1):
                self._change_number += 1
                sequence = when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 10_000:02d}"
                sequence += f"{self._change_number:019d}"
                headers = {
                    "changeSequence": sequence,
                    "timestamp": stamp,
                    "streamPosition": f"{tx.number:08x}.{counter:04x}",
                    "transactionId": f"{tx.number:032X}",
                    "transactionEventCounter": counter,
                    "transactionLastEvent": counter == len(tx.changes),
                }
                written = self._written(change, change.op, sequence, headers, tx.number)
                yield written
                if self.rng.random() < self.duplicate_ratio:
                    yield written  # a producer retry: the same message again

    def _written(
        self,
        change: SourceChange,
        op: str,
        sequence: str | None,
        headers: dict[str, Any],
        transaction: int | None = None,
    ) -> Written:
        table = self.tables[change.table]
        row = change.after if change.after is not None else change.before
        assert row is not None
        key = [row[k] for k in table.key]
        mask = "".join("F" for _ in range((len(table.columns) + 3) // 4))
        headers = {"operation": op, **headers, "changeMask": mask, "columnMask": mask}
        message = {
            "data": self._row(table, change.after),
            "beforeData": self._row(table, change.before),
            "headers": headers,
        }
        value = self._wrap("DT", table, message)
        return Written(
            partition_of(table.name, key, self.partitions),
            repr(key).encode(),
            value,
            change,
            sequence,
            transaction,
            op,
        )

    def _row(self, table: SourceTable, row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        encode = qlik_avro if self.encoding == "avro" else qlik_json
        return {c.name: encode(c, row[c.name]) for c in table.columns}

    def _wrap(self, kind: str, table: SourceTable | None, message: dict[str, Any]) -> bytes:
        if self.encoding == "json":
            if not self.envelope:
                return json.dumps(message, ensure_ascii=False).encode()
            schema_id = self.schema_id(table) if table is not None else None
            return json.dumps(
                {
                    "magic": "atMSG",
                    "type": kind,
                    "headers": None,
                    "messageSchemaId": schema_id,
                    "messageSchema": None,
                    "message": message,
                },
                ensure_ascii=False,
            ).encode()
        if kind == "MD":
            body = _avro(_METADATA, message)
            schema_id = None
        else:
            assert table is not None
            headers = dict(message["headers"])
            for name in ("changeMask", "columnMask"):
                headers[name] = bytes.fromhex(
                    headers[name].rjust(len(headers[name]) + len(headers[name]) % 2, "0")
                )
            for name in ("changeSequence", "timestamp", "streamPosition", "transactionId"):
                headers.setdefault(name, "")
            body = _avro(
                fastavro.parse_schema(self.data_schema(table)), dict(message, headers=headers)
            )
            schema_id = self.schema_id(table)
        return _avro(
            _ENVELOPE,
            {
                "magic": b"atMSG",
                "type": kind,
                "headers": None,
                "messageSchemaId": schema_id,
                "messageSchema": None,
                "message": body,
            },
        )


def _avro(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()
