"""DataWorks' "sync all data to Kafka" messages → records (docs/contracts/CDC.md "DataWorks").

Every value is one JSON object carrying its table's `schema`; the mapped table is cached by
that schema, so a table whose columns change is seen at its first message with the new ones.
"""

from __future__ import annotations

from typing import Any

import orjson

from podd_cdc.dataworks_fast import MESSAGE_READER, KnownSchemas
from podd_cdc.errors import BadInput, SchemaStop, an_object
from podd_cdc.json_fast import (
    DecodeError,
    NotSure,
    Raw,
    RowReader,
    checked,
    plain_message,
    row_reader,
)
from podd_cdc.records import Change, Heartbeat, Record, RowChange, Skipped
from podd_cdc.tables import (
    DATAWORKS_ROW_ID,
    MappedTable,
    SourceNames,
    check_against,
    describe,
    map_table,
    replica_name,
)
from podd_cdc.values import dataworks_column
from protocol.schema import LogicalSchema

ROW_OPS = frozenset({"INSERT", "UPDATE_AFTER", "UPDATE_BEFOR", "DELETE"})
UPSERT_OPS = frozenset({"INSERT", "UPDATE_AFTER"})
#: Messages that change no row: counted and passed over.
MARKERS = (
    "TRANSACTION_BEGIN",
    "TRANSACTION_END",
    "GTID",
    "XACOMMIT",
    "XAROLLBACK",
    "CINDEX",
    "DINDEX",
    "QUERY",
)
NO_ROW_OPS = frozenset(MARKERS)
#: DDL of a replicated table that changes what the replica holds: the schema stop.
TABLE_DDL = frozenset({"ALTER", "ERASE", "TRUNCATE", "RENAME"})
#: The mapped tables kept by their schema; more distinct schemas than this is bad input.
MAX_SCHEMAS = 10_000


def _whole(value: Any, what: str) -> int:
    """A whole number: a JSON integer of 0 or more, or text of at most 40 ASCII digits (other
    digits, such as '²', which `str.isdigit` accepts and `int` refuses, are bad input)."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= 40:
            return int(text)
    raise BadInput(None, f"{what} {str(value)[:40]!r} is not a whole number")


def change_of(rows: tuple[RowChange, ...], op: str, sequence: int, millis: int) -> Change:
    """A DataWorks change: its eventTime (ms) is its cut key, and no `source_time` is made of
    it (with its cache, 0.35 µs a message on the bench's): the delta's date is the
    watermark, and the sequence check bounds the eventTime itself."""
    half = 0 if op == "UPDATE_BEFOR" else 1
    return Change(rows, millis, (sequence, half), (sequence, op), None, None, None, True)


def event_time(payload: dict[str, Any]) -> int:
    stamps = an_object(payload.get("timestamp"), "payload.timestamp")
    millis = _whole(stamps.get("eventTime"), "eventTime")
    if millis > MAX_EVENT_MILLIS:
        raise BadInput(None, f"eventTime {millis} is out of range (past year 9999)")
    return millis


#: The last millisecond a time can hold (9999-12-31T23:59:59.999); a later eventTime
#: made `millis_time` raise OverflowError, which no bad-input path caught.
MAX_EVENT_MILLIS = 253_402_300_799_999


class DataWorksDecoder:
    def __init__(self, expected: LogicalSchema | None = None, *, fast: bool = True) -> None:
        self.expected = expected
        self.fast = fast  # the msgspec path for row messages
        self._fast_tables: KnownSchemas[tuple[MappedTable, RowReader]] = KnownSchemas(MAX_SCHEMAS)
        self._tables: dict[bytes, MappedTable] = {}
        self.by_name: dict[str, MappedTable] = {}
        self._last: dict[str, tuple[Any, MappedTable]] = {}  # by source table name
        self.sources = SourceNames()

    def decode(self, topic: str, value: bytes | None) -> Record:
        del topic  # every message names its table
        if self.fast and value and value[:1] == b"{" and plain_message(value):
            fast = self._fast(value)
            if fast is not None:
                return fast
        if not value or (value[:1] != b"{" and value.lstrip()[:1] != b"{"):
            raise BadInput(None, "not a JSON object")
        try:
            obj = an_object(orjson.loads(value), "the value")
        except orjson.JSONDecodeError as exc:
            raise BadInput(None, f"not JSON: {exc}") from None
        payload = an_object(obj.get("payload"), "payload")
        op = payload.get("op")
        if not isinstance(op, str):  # an unhashable one would fail the lookups below
            raise BadInput(None, f"op {str(op)[:20]!r} is not one DataWorks writes")
        if op == "MHEARTBEAT":
            return Heartbeat(event_time(payload))
        if op in NO_ROW_OPS:
            return Skipped(str(op))
        schema = an_object(obj.get("schema"), "schema")
        source = an_object(schema.get("source"), "schema.source")
        source_table = source.get("tableName")
        if not isinstance(source_table, str):
            raise BadInput(None, "schema.source.tableName is not a name")
        if op == "CREATE":
            return self._create(schema, source_table)
        if op in TABLE_DDL:
            return self._ddl(str(op), source_table, payload)
        if op not in ROW_OPS:
            raise BadInput(None, f"op {str(op)[:20]!r} is not one DataWorks writes")
        table = self._table(schema, source_table)
        sequence = _whole(payload.get("sequenceId"), "sequenceId")
        millis = event_time(payload)
        if op in ("INSERT", "UPDATE_AFTER"):
            after = table.row(an_object(self._columns(payload, "after"), f"{op} after"), op)
            before_obj = payload.get("before")
            before = None
            if op == "UPDATE_AFTER" and before_obj:
                before = table.key_row(an_object(self._columns(payload, "before"), "before"), op)
            rows: tuple[RowChange, ...] = table.changes(before, after)
        else:  # UPDATE_BEFOR (the key's old half) or DELETE
            gone = table.key_row(an_object(self._columns(payload, "before"), f"{op} before"), op)
            rows = (table.delete(gone),)
        return change_of(rows, str(op), sequence, millis)

    def _fast(self, value: bytes) -> Record | None:
        """A row message by `dataworks_fast`; None: the exact path decides."""
        try:
            message = MESSAGE_READER.decode(value)
            payload = message.payload
            if payload is None or payload.op not in ROW_OPS or payload.timestamp is None:
                return None
            table, reader = self._fast_table(message.schema)
            op = payload.op
            sequence = _whole(checked(payload.sequenceId), "sequenceId")
            millis = _whole(checked(payload.timestamp.eventTime), "eventTime")
            if millis > MAX_EVENT_MILLIS or (payload.after is None and op in UPSERT_OPS):
                return None
            if op in UPSERT_OPS:
                after = reader.whole(payload.after.dataColumn)  # type: ignore[union-attr]
                before = None
                if op == "UPDATE_AFTER" and payload.before is not None:
                    before = reader.keyed(payload.before.dataColumn)
                rows = table.changes(before, after)
            elif payload.before is not None:
                rows = (table.delete(reader.keyed(payload.before.dataColumn)),)
            else:
                return None
            return change_of(rows, op, sequence, millis)
        except (DecodeError, NotSure, BadInput, UnicodeDecodeError, orjson.JSONDecodeError):
            return None

    def known_table(self, schema: bytes) -> MappedTable | None:
        """The table of a message's `schema` (its bytes), where a message the fast path read
        has taught it; None otherwise (`podd_cdc.dataworks_batch` then leaves the message
        to this decoder)."""
        found = self._fast_tables.get(Raw(schema))
        return None if found is None else found[0]

    def learn_table(self, schema: bytes) -> MappedTable | None:
        """Learn the table of a row message's `schema` (its bytes) now, as decoding that
        message would (the fast path's `_learn`, with every side effect it has); None where
        that fails: the message is then this decoder's, which names what is wrong. For the
        batch reader (`podd_cdc.dataworks_batch_intake`), which asks only at a message this
        decoder would read next."""
        try:
            return self._fast_table(Raw(schema))[0]
        except (BadInput, NotSure, orjson.JSONDecodeError):
            return None

    def _fast_table(self, raw: Raw) -> tuple[MappedTable, RowReader]:
        """The table of a message's raw `schema`: known, or learnt now."""
        found = self._fast_tables.get(raw)
        return found if found is not None else self._learn(raw)

    def _learn(self, raw: Raw) -> tuple[MappedTable, RowReader]:
        """The table a message's raw `schema` names, by the exact path's rules."""
        schema = an_object(orjson.loads(bytes(raw)), "schema")
        source_table = an_object(schema.get("source"), "schema.source").get("tableName")
        if not isinstance(source_table, str):
            raise NotSure
        table = self._table(schema, source_table)
        found = (table, row_reader(table))
        self._fast_tables.add(raw, found)
        return found

    @staticmethod
    def _columns(payload: dict[str, Any], side: str) -> Any:
        image = payload.get(side)
        if not isinstance(image, dict):
            raise BadInput(None, f"payload.{side} is not an object")
        return image.get("dataColumn")

    def _table(self, schema: dict[str, Any], source_table: str) -> MappedTable:
        seen = (schema.get("dataColumn"), schema.get("primaryKey"), schema.get("source"))
        last = self._last.get(source_table)
        if last is not None and last[0] == seen:
            return last[1]  # the schema this table's previous message carried
        table = self._table_of(schema, source_table)
        if len(self._last) < MAX_SCHEMAS:
            self._last[source_table] = (seen, table)
        return table

    def _table_of(self, schema: dict[str, Any], source_table: str) -> MappedTable:
        cache_key = orjson.dumps(
            [source_table, schema.get("dataColumn"), schema.get("primaryKey"), schema.get("source")]
        )
        table = self._tables.get(cache_key)
        if table is None:
            table = self._map(schema, source_table)
            # Checked before the table is kept: a schema kept once refused would be taken at
            # its next reading (the exact path reads again what the fast path refused).
            known = self.by_name.get(table.name)
            if known is not None and known.table != table.table:
                raise SchemaStop(
                    None,
                    f"table {table.name} changed: was {describe(known.table)}, "
                    f"now {describe(table.table)}",
                )
            if len(self._tables) >= MAX_SCHEMAS:
                raise BadInput(None, f"more than {MAX_SCHEMAS:,} distinct table schemas")
            self._tables[cache_key] = table
            self.by_name[table.name] = table
        return table

    def _map(self, schema: dict[str, Any], source_table: str) -> MappedTable:
        columns_obj = schema.get("dataColumn")
        if not isinstance(columns_obj, list) or not columns_obj:
            raise BadInput(None, f"table {source_table}: schema.dataColumn is not a list")
        try:
            columns = [dataworks_column(str(c["name"]), str(c["type"])) for c in columns_obj]
        except (KeyError, TypeError) as exc:
            raise BadInput(None, f"table {source_table}: a column without {exc}") from None
        except ValueError as exc:
            raise BadInput(None, f"table {source_table}: {exc}") from None
        key = schema.get("primaryKey")
        if not key:
            names = [c.name for c in columns]
            key = [DATAWORKS_ROW_ID] if DATAWORKS_ROW_ID in names else []
        if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
            raise BadInput(None, f"table {source_table}: primaryKey is not a list of names")
        table, mapped = map_table(source_table, columns, key, "schema")
        origin = an_object(schema.get("source"), "schema.source")
        where = ".".join(str(origin.get(k)) for k in ("dbName", "schemaName", "tableName"))
        self.sources.claim(table.name, where)
        check_against(self.expected, table)
        return MappedTable(table, mapped)

    def _create(self, schema: dict[str, Any], source_table: str) -> Record:
        if self.expected is None or not self.expected.has_table(replica_name(source_table)):
            name = replica_name(source_table)
            raise BadInput(None, f"CREATE of table {name}, which the replica's schema lacks")
        self._table(schema, source_table)
        return Skipped("CREATE")

    def _ddl(self, op: str, source_table: str, payload: dict[str, Any]) -> Record:
        name = replica_name(source_table)
        replicated = name in self.by_name or (
            self.expected is not None and self.expected.has_table(name)
        )
        if not replicated:
            return Skipped(op)
        ddl = payload.get("ddl")
        text = ddl.get("text") if isinstance(ddl, dict) else None
        detail = f": {str(text)[:200]}" if text else ""
        raise SchemaStop(None, f"{op} of replicated table {name}{detail}")
