"""Qlik Replicate's Kafka messages → records (docs/contracts/CDC.md "Qlik Replicate").

JSON or Avro, with or without the envelope. Metadata messages fill a catalog (schemaId and
table name → the mapped table); a data message names its table by the envelope's
`messageSchemaId`, or, without an envelope, by its topic (`topic_tables`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Mapping
from typing import Any

import fastavro
import orjson

from podd_cdc.errors import AwaitingMetadata, BadInput, SchemaStop, an_object
from podd_cdc.qlik_avro import MAGIC, PARSED_ENVELOPE, PARSED_METADATA, writer_schema
from podd_cdc.qlik_fast import MAGIC_TEXT, FastPath
from podd_cdc.qlik_headers import UPSERTS, column_mask, header_change
from podd_cdc.records import Record, RowChange, TableSeen
from podd_cdc.tables import MappedTable, SourceNames, check_against, map_table
from podd_cdc.values import qlik_column
from protocol.schema import LogicalSchema

#: Writer schemas kept at most (metadata `dataSchema`s and inline `messageSchema`s).
MAX_SCHEMAS = 10_000
#: Table descriptions (metadata schemaIds) kept at most.
MAX_TABLE_VERSIONS = 10_000
#: A column's `ordinal` (1-based) at most: the columnMask has a bit per ordinal, so a larger
#: one would make a number of that many bits (or fail, below 1).
MAX_ORDINAL = 10_000


def _read_avro(data: Any, schema: Any) -> Any:
    if not isinstance(data, bytes):
        raise ValueError("not bytes")
    return fastavro.schemaless_reader(io.BytesIO(data), schema, None)


class QlikDecoder:
    def __init__(
        self,
        expected: LogicalSchema | None = None,
        topic_tables: Mapping[str, str] | None = None,
        *,
        fast: bool = True,
    ) -> None:
        self.expected = expected
        self.fast = fast  # the msgspec path for data messages in their envelope
        self.topic_tables = dict(topic_tables or {})
        self.by_schema_id: dict[str, MappedTable] = {}
        self.by_name: dict[str, MappedTable] = {}
        self._id_by_name: dict[str, str] = {}  # a table's newest schemaId
        self._changed: dict[str, SchemaStop] = {}  # a table's newest metadata, if refused
        self._ordinals: dict[str, dict[str, int]] = {}
        self._needed: dict[str, tuple[int, int]] = {}  # schemaId → masks: every column, key
        self.sources = SourceNames()
        self._data_schemas: dict[str, Any] = {}
        self._fast_path = FastPath(self.by_schema_id, self._changed, self._check_mask)

    # --- the message ------------------------------------------------------------------
    def decode(self, topic: str, value: bytes | None) -> Record:
        if not value:
            raise BadInput(None, "an empty value")
        if value[:5] == MAGIC:
            return self._avro_envelope(value)
        if self.fast and value[:1] == b"{":
            fast = self._fast_path.decode(value)
            if fast is not None:
                return fast
        if value[:1] != b"{" and value.lstrip()[:1] != b"{":
            raise BadInput(None, "neither JSON nor a Qlik Avro envelope")
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise BadInput(None, f"not JSON: {exc}") from None
        obj = an_object(obj, "the value")
        if obj.get("magic") == MAGIC_TEXT:
            message = an_object(obj.get("message"), "the envelope's message")
            if obj.get("type") == "MD":
                return self._metadata(message)
            if obj.get("type") == "DT":
                return self._data(message, self._table_by_id(obj.get("messageSchemaId")))
            raise BadInput(None, f"envelope type {str(obj.get('type'))[:20]!r} is not MD or DT")
        if "tableStructure" in obj:
            return self._metadata(obj)
        return self._data(obj, self._table_by_topic(topic))

    def _avro_envelope(self, value: bytes) -> Record:
        try:
            envelope = _read_avro(value, PARSED_ENVELOPE)
            if envelope["type"] == "MD":
                metadata = _read_avro(envelope["message"], PARSED_METADATA)
                return self._metadata(an_object(metadata, "the metadata message"))
        except (EOFError, ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
            raise BadInput(None, f"not a Qlik Avro envelope: {exc!r}"[:200]) from None
        if envelope["type"] != "DT":
            raise BadInput(None, f"envelope type {envelope['type'][:20]!r} is not MD or DT")
        table = self._table_by_id(envelope["messageSchemaId"])
        schema = self._data_schema(envelope["messageSchemaId"], envelope["messageSchema"])
        try:
            message = _read_avro(envelope["message"], schema)
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise BadInput(
                None, f"the data message is not Avro of its schema: {exc!r}"[:200]
            ) from None
        return self._data(an_object(message, "the data message"), table)

    def _data_schema(self, schema_id: str | None, inline: str | None) -> Any:
        """The writer schema of a data message: its own `messageSchema`, else its table's
        `dataSchema`. Inline schemas are cached up to a bound (a message may be hostile)."""
        if inline is not None:
            parsed = self._data_schemas.get(inline)
            if parsed is None:
                try:
                    parsed = writer_schema(inline)
                except ValueError as exc:
                    raise BadInput(None, f"messageSchema: {exc}"[:200]) from None
                if len(self._data_schemas) < MAX_SCHEMAS:
                    self._data_schemas[inline] = parsed
            return parsed
        if schema_id is None or schema_id not in self._data_schemas:
            raise BadInput(None, "a data message with no schema of its own or of its table")
        return self._data_schemas[schema_id]

    # --- metadata ---------------------------------------------------------------------
    def learn(self, message: dict[str, Any]) -> TableSeen:
        """Replay a metadata message read in an earlier run (the durable catalog)."""
        seen = self._metadata(message)
        assert isinstance(seen, TableSeen)
        return seen

    def _metadata(self, message: dict[str, Any]) -> Record:
        try:
            schema_id = str(message["schemaId"])
            table_name = str(an_object(message["lineage"], "lineage")["table"])
            columns = an_object(
                an_object(message["tableStructure"], "tableStructure")["tableColumns"],
                "tableColumns",
            )
            ordered = sorted(columns.items(), key=lambda item: int(item[1]["ordinal"]))
            mapped_columns = [
                qlik_column(
                    name, str(c["type"]), c.get("length"), c.get("precision"), c.get("scale")
                )
                for name, c in ordered
            ]
            keyed = sorted((int(c.get("primaryKeyPosition") or 0), name) for name, c in ordered)
            key = [name for position, name in keyed if position > 0]
            ordinals = {name: int(c["ordinal"]) for name, c in ordered}
            outside = [n for n, o in ordinals.items() if not 1 <= o <= MAX_ORDINAL]
            if outside:
                raise ValueError(f"column {outside[0]}'s ordinal is not 1 to {MAX_ORDINAL:,}")
            data_schema = message.get("dataSchema")
        except (KeyError, TypeError, AttributeError) as exc:
            raise BadInput(None, f"a metadata message without {exc}"[:200]) from None
        except ValueError as exc:
            raise BadInput(None, f"a metadata message: {exc}"[:300]) from None
        if schema_id not in self.by_schema_id and len(self.by_schema_id) >= MAX_TABLE_VERSIONS:
            raise BadInput(
                None,
                f"more than {MAX_TABLE_VERSIONS:,} table descriptions (schemaIds) were read: "
                "a source of that many table versions, or metadata messages from a flood",
            )
        table, mapped = map_table(table_name, mapped_columns, key, "metadata")
        lineage = message["lineage"]
        where = ".".join(str(lineage.get(k)) for k in ("server", "schema", "table"))
        self.sources.claim(table.name, where)
        current = MappedTable(table, mapped)
        try:
            check_against(self.expected, table)
            self._changed.pop(schema_id, None)
        except SchemaStop as stop:
            self._changed[schema_id] = stop  # refused at the first data message that uses it
        self.by_schema_id[schema_id] = current
        self._fast_path.forget(schema_id)
        self.by_name[table.name] = current
        self._id_by_name[table.name] = schema_id
        self._ordinals[schema_id] = {c.name: ordinals[c.source_name] for c in mapped}
        bits = {c.name: 1 << (ordinals[c.source_name] - 1) for c in mapped}
        self._needed[schema_id] = (sum(bits.values()), sum(bits[k] for k in table.primary_key))
        if isinstance(data_schema, str) and schema_id not in self._data_schemas:
            # Only Avro data messages need it; a JSON task may write any text here.
            with contextlib.suppress(ValueError):
                self._data_schemas[schema_id] = writer_schema(data_schema)
        return TableSeen(schema_id, table, message)

    def _table_by_id(self, schema_id: Any) -> tuple[str, MappedTable]:
        if not isinstance(schema_id, str):
            raise BadInput(None, "a data message without messageSchemaId")
        if schema_id in self._changed:
            raise self._changed[schema_id]
        table = self.by_schema_id.get(schema_id)
        if table is None:
            raise AwaitingMetadata(f"schemaId {schema_id}")
        return schema_id, table

    def _table_by_topic(self, topic: str) -> tuple[str, MappedTable]:
        name = self.topic_tables.get(topic)
        if name is None:
            raise BadInput(None, f"no envelope, and no table is configured for topic {topic}")
        table = self.by_name.get(name)
        if table is None:
            raise AwaitingMetadata(f"table {name}")
        schema_id = self._id_by_name[name]
        if schema_id in self._changed:
            raise self._changed[schema_id]
        return schema_id, table

    # --- data -------------------------------------------------------------------------
    def _data(self, message: dict[str, Any], found: tuple[str, MappedTable]) -> Record:
        schema_id, table = found
        headers = message.get("headers")
        if type(headers) is not dict:
            headers = an_object(headers, "headers")
        operation = headers.get("operation")
        if not isinstance(operation, str):  # an unhashable one would fail the lookups below
            raise BadInput(None, f"operation {str(operation)[:20]!r} is not one Qlik writes")
        data, before = message.get("data"), message.get("beforeData")
        self._check_mask(schema_id, table, headers.get("columnMask"), operation)
        if operation in UPSERTS:
            after = table.row(data if type(data) is dict else an_object(data, "data"), operation)
            old = table.row(an_object(before, "beforeData"), "beforeData") if before else None
            rows: tuple[RowChange, ...] = table.changes(old, after)
        elif operation == "DELETE":
            gone = before if before else data
            rows = (table.delete(table.key_row(an_object(gone, "DELETE data"), "DELETE")),)
        else:
            raise BadInput(None, f"operation {str(operation)[:20]!r} is not one Qlik writes")
        get = headers.get
        return header_change(
            rows,
            operation,
            get("changeSequence"),
            get("timestamp"),
            get("transactionId"),
            get("transactionEventCounter"),
            get("transactionLastEvent"),
        )

    def batch_table(self, schema_id: str) -> MappedTable | None:
        """The table whose data messages of `schema_id` a reader of batches may take, as
        the fast path may: one described, whose newest description was not refused; else
        None (the exact path decides such a message)."""
        if schema_id in self._changed:
            return None
        return self.by_schema_id.get(schema_id)

    def mask_check(self, schema_id: str) -> Callable[[str, str], None]:
        """Table `schema_id`'s `columnMask` check (mask text, operation), for a reader of
        batches (`podd_cdc.qlik_batch_changes`): the one rule, this decoder's."""
        table = self.by_schema_id[schema_id]
        return lambda mask, operation: self._check_mask(schema_id, table, mask, operation)

    def _check_mask(self, schema_id: str, table: MappedTable, raw: Any, operation: Any) -> None:
        mask = column_mask(raw)
        if mask is None:
            return
        every, key = self._needed[schema_id]
        need = key if operation == "DELETE" else every
        if mask & need == need:
            return
        needed = table.table.primary_key if operation == "DELETE" else table.table.column_names
        ordinals = self._ordinals[schema_id]
        for name in needed:
            if not mask >> (ordinals[name] - 1) & 1:
                raise BadInput(
                    None, f"column {name} of table {table.name} was not captured (columnMask)"
                )
