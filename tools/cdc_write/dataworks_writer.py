"""DataWorks' "sync all data to Kafka", as the writer of a test or demo topic.

Each change is one JSON message carrying its table's `schema`; an update is an
`UPDATE_BEFOR` / `UPDATE_AFTER` pair sharing one `sequenceId` (or, with
`one_record_ratio`, a single `UPDATE_AFTER` holding both images). Every `heartbeat_every`
changes, each partition gets an `MHEARTBEAT` whose `eventTime` no change written before it
exceeds. With `late_ratio`, an insert is held back past the next heartbeat (a late change).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from typing import Any

from tools.cdc_write.qlik_writer import Written, partition_of
from tools.cdc_write.source import SourceChange, SourceTable, SourceTransaction
from tools.cdc_write.wire import dataworks_json


class DataWorksWriter:
    def __init__(
        self,
        tables: Iterable[SourceTable],
        *,
        partitions: int = 4,
        heartbeat_every: int = 50,
        late_ratio: float = 0.0,
        one_record_ratio: float = 0.0,
        marker_ratio: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.tables = {t.name: t for t in tables}
        self.partitions = partitions
        self.heartbeat_every = heartbeat_every
        self.late_ratio = late_ratio
        self.one_record_ratio = one_record_ratio
        self.marker_ratio = marker_ratio
        self.rng = random.Random(seed)  # noqa: S311 - a seeded workload, not a secret
        self._sequence = 1_000_000_000_000
        self._since_heartbeat = 0

    def schema(self, table: SourceTable) -> dict[str, Any]:
        return {
            "dataColumn": [{"name": c.name, "type": c.type} for c in table.columns],
            "primaryKey": list(table.key) or None,
            "source": {
                "dbType": "MySQL",
                "dbVersion": "8.0",
                "dbName": "shop",
                "schemaName": "shop",
                "tableName": table.name.upper(),
            },
        }

    def _message(self, table: SourceTable | None, payload: dict[str, Any]) -> bytes:
        body = {
            "schema": self.schema(table) if table else None,
            "payload": payload,
            "version": "1.0",
        }
        return json.dumps(body, ensure_ascii=False).encode()

    def _image(self, table: SourceTable, row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {"dataColumn": {c.name: dataworks_json(c, row[c.name]) for c in table.columns}}

    def heartbeat(self, event_ms: int) -> list[Written]:
        payload = {
            "op": "MHEARTBEAT",
            "timestamp": {
                "eventTime": event_ms,
                "systemTime": event_ms,
                "checkpointTime": event_ms,
            },
        }
        return [Written(p, None, self._message(None, payload)) for p in range(self.partitions)]

    def _row_message(
        self,
        table: SourceTable,
        op: str,
        sequence: int,
        event_ms: int,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        change: SourceChange,
    ) -> Written:
        row = after if after is not None else before
        assert row is not None
        identity = table.key or (table.columns[0].name,)
        key = [row[k] for k in identity]
        payload = {
            "before": self._image(table, before),
            "after": self._image(table, after),
            "sequenceId": str(sequence),
            "scn": str(sequence),
            "op": op,
            "timestamp": {
                "eventTime": event_ms,
                "systemTime": event_ms + 3,
                "checkpointTime": event_ms,
            },
            "ddl": None,
        }
        op = op if not (op == "UPDATE_AFTER" and before) else "UPDATE_AFTER+BEFORE"
        return Written(
            partition_of(table.name, key, self.partitions),
            repr(key).encode(),
            self._message(table, payload),
            change,
            str(sequence),
            None,
            op,
        )

    def change_messages(self, change: SourceChange, event_ms: int) -> list[Written]:
        table = self.tables[change.table]
        self._sequence += 1
        sequence = self._sequence
        if change.op in ("INSERT", "REFRESH"):
            return [
                self._row_message(table, "INSERT", sequence, event_ms, None, change.after, change)
            ]
        if change.op == "DELETE":
            return [
                self._row_message(table, "DELETE", sequence, event_ms, change.before, None, change)
            ]
        if self.rng.random() < self.one_record_ratio:
            return [
                self._row_message(
                    table, "UPDATE_AFTER", sequence, event_ms, change.before, change.after, change
                )
            ]
        return [
            self._row_message(
                table, "UPDATE_BEFOR", sequence, event_ms, change.before, None, change
            ),
            self._row_message(
                table, "UPDATE_AFTER", sequence, event_ms, None, change.after, change
            ),
        ]

    def transactions(self, transactions: Iterable[SourceTransaction]) -> Iterator[Written]:
        held: list[Written] = []
        last_ms = 0
        for tx in transactions:
            last_ms = tx.commit_ms
            if self.rng.random() < self.marker_ratio:
                yield Written(0, None, self._message(None, {"op": "TRANSACTION_BEGIN"}))
            for change in tx.changes:
                messages = self.change_messages(change, tx.commit_ms)
                if change.op == "INSERT" and self.rng.random() < self.late_ratio:
                    held += messages  # written after the next heartbeat: late
                else:
                    yield from messages
                self._since_heartbeat += 1
            if self._since_heartbeat >= self.heartbeat_every:
                self._since_heartbeat = 0
                yield from self.heartbeat(tx.commit_ms)
                yield from held
                held = []
        yield from held
        if last_ms:
            yield from self.heartbeat(last_ms)

    def ddl(self, table_name: str, text: str, event_ms: int) -> Written:
        table = self.tables[table_name]
        payload = {
            "op": "ALTER",
            "sequenceId": str(self._sequence + 1),
            "timestamp": {"eventTime": event_ms},
            "ddl": {"text": text, "ddlMeta": None},
            "before": None,
            "after": None,
        }
        return Written(0, None, self._message(table, payload))
