"""The fast path of a Qlik JSON data message in its envelope (`podd_cdc.json_fast`): it says
yes only to what the exact path accepts, with the same change, and None to the rest, which
the exact path then decides.

It reads a message in one pass where it can: one msgspec decoder over the tables in use, each
an envelope struct tagged by its `messageSchemaId`, every field typed and no field unknown.
Nothing is skipped unread, so msgspec has checked every text's UTF-8 and the message needs no
check of its own (the envelope, then the row, then the UTF-8 cost a third more). A message it
cannot read so (a table not in the decoder yet, a field it does not know, a value of another
JSON type) is read in two passes: the envelope with the row kept raw, then the row, after a
check of the message's UTF-8. Tables join the one pass as they are read in two; the decoder
is made again at most once per `REBUILD_PER_TABLE` messages a table in it, so a flood of
table descriptions cannot make it be rebuilt at every message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union

import msgspec

from podd_cdc.errors import BadInput
from podd_cdc.json_fast import NULL, DecodeError, NotSure, RowReader, plain_message, row_reader
from podd_cdc.qlik_avro import MAGIC
from podd_cdc.qlik_headers import UPSERTS, header_change
from podd_cdc.records import Change
from podd_cdc.tables import MappedTable
from podd_cdc.values import MAX_VALUE_BYTES

MAGIC_TEXT = MAGIC.decode()
#: Tables read in one pass at most (the decoder of 1,000 took 0.17 s to make).
MAX_ONE_PASS_TABLES = 1_000
#: The one-pass decoder is made again at most once per this many messages a table in it.
REBUILD_PER_TABLE = 1_000

#: A counter the fast path reads: a 64-bit signed integer (orjson reads every one of them as
#: an integer; a larger one takes the exact path).
_Counter = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Headers(msgspec.Struct):
    """The headers as Qlik's JSON writes them; a header of another JSON type fails this
    decode, and the exact path decides the message (so no header needs a check here)."""

    operation: str | None = None
    changeSequence: str | None = None
    timestamp: str | None = None
    transactionId: str | None = None
    transactionEventCounter: _Counter | None = None
    transactionLastEvent: bool | None = None
    columnMask: str | None = None


class Message(msgspec.Struct):
    headers: Headers  # required: a message without headers takes the exact path
    data: msgspec.Raw = NULL
    beforeData: msgspec.Raw = NULL


class Envelope(msgspec.Struct):
    magic: Any = None
    type: Any = None
    messageSchemaId: Any = None
    message: Message | None = None


ENVELOPE_READER = msgspec.json.Decoder(Envelope)


class EveryHeader(Headers, forbid_unknown_fields=True):
    """The headers read in one pass: every one Qlik writes, and no other."""

    streamPosition: str | None = None
    changeMask: str | None = None


def _tagged_envelope(schema_id: str, reader: RowReader) -> type[msgspec.Struct]:
    """A whole data message of `reader`'s table in its envelope, tagged by `schema_id`."""
    row = reader.row_type
    message = msgspec.defstruct(
        "OnePassMessage",
        [("headers", EveryHeader), ("data", row | None, None), ("beforeData", row | None, None)],
        forbid_unknown_fields=True,
    )
    return msgspec.defstruct(
        "OnePassEnvelope",
        [
            ("magic", str),
            ("type", str),
            ("message", message),
            ("headers", dict[str, str] | None, None),
            ("messageSchema", str | None, None),
        ],
        forbid_unknown_fields=True,
        tag_field="messageSchemaId",
        tag=schema_id,
    )


class _NoTable(
    msgspec.Struct, tag_field="messageSchemaId", tag="\x00 no table", forbid_unknown_fields=True
):
    """A member of every one-pass union, which no table joins: msgspec reads a struct alone
    as tagged even when its tag is absent, and a message without `messageSchemaId` (bad
    input to the exact path) would have been read as the one table in use."""


class OnePass:
    """The one-pass decoder over the tables in use (at most `MAX_ONE_PASS_TABLES`), made
    again as tables join or change, within the rebuild bound."""

    def __init__(self) -> None:
        self.decoder: msgspec.json.Decoder[Any] | None = None
        #: The decoder's envelope types → their table's schemaId and row reader.
        self.members: dict[type, tuple[str, RowReader]] = {}
        self.stale: set[str] = set()  # described again since the decoder was made
        self._wanted: dict[str, RowReader] = {}
        self._pending = False  # a table joined or changed since
        self._until = 0  # messages left before the decoder may be made again

    def join(self, schema_id: str, reader: RowReader) -> None:
        if schema_id not in self._wanted and len(self._wanted) < MAX_ONE_PASS_TABLES:
            self._wanted[schema_id] = reader
            self._pending = True

    def forget(self, schema_id: str) -> None:
        if self._wanted.pop(schema_id, None) is not None:
            self.stale.add(schema_id)
            self._pending = True

    def due(self) -> msgspec.json.Decoder[Any] | None:
        """The decoder, made again first if a table joined or changed and the bound allows."""
        self._until -= 1
        if self._pending and self._until <= 0:
            self.members = {_tagged_envelope(k, r): (k, r) for k, r in self._wanted.items()}
            types: tuple[Any, ...] = (_NoTable, *self.members)
            union: Any = Union[types]  # noqa: UP007 (a union made at run time)
            self.decoder = msgspec.json.Decoder(union) if self.members else None
            self.stale.clear()
            self._pending = False
            self._until = REBUILD_PER_TABLE * len(self.members)
        return self.decoder


class FastPath:
    """Reads the data messages of the tables known (`tables`, by schemaId; those in `refused`
    are left to the exact path, which refuses them); `check_mask` applies the columnMask rule
    of a table's schemaId, as the exact path does."""

    def __init__(
        self,
        tables: Mapping[str, MappedTable],
        refused: Mapping[str, Any],
        check_mask: Callable[[str, MappedTable, Any, Any], None],
    ) -> None:
        self._tables = tables
        self._refused = refused
        self._check_mask = check_mask
        self._readers: dict[str, RowReader] = {}
        self.one_pass = OnePass()

    def forget(self, schema_id: str) -> None:
        """The table of `schema_id` was described again: its readers are made anew."""
        self._readers.pop(schema_id, None)
        self.one_pass.forget(schema_id)

    def decode(self, value: bytes) -> Change | None:
        if len(value) > MAX_VALUE_BYTES:
            return None
        decoder = self.one_pass.due()
        if decoder is not None:
            change = self._in_one_pass(decoder, value)
            if change is not None:
                return change
        return self._in_two_passes(value) if plain_message(value) else None

    def _reader(self, schema_id: str) -> RowReader:
        reader = self._readers.get(schema_id)
        if reader is None:
            reader = self._readers[schema_id] = row_reader(self._tables[schema_id])
        return reader

    def _in_one_pass(self, decoder: msgspec.json.Decoder[Any], value: bytes) -> Change | None:
        try:
            envelope = decoder.decode(value)
            member = self.one_pass.members.get(type(envelope))
            if member is None:
                return None
            schema_id, reader = member
            if (
                envelope.magic != MAGIC_TEXT
                or envelope.type != "DT"
                or schema_id in self.one_pass.stale
                or schema_id in self._refused
            ):
                return None
            message = envelope.message
            return self._change(
                schema_id,
                message.headers,
                message.data,
                message.beforeData,
                reader.whole_of,
                reader.keyed_of,
            )
        except (DecodeError, NotSure, BadInput, UnicodeDecodeError):
            return None

    def _in_two_passes(self, value: bytes) -> Change | None:
        try:
            envelope = ENVELOPE_READER.decode(value)
            message = envelope.message
            schema_id = envelope.messageSchemaId
            if envelope.magic != MAGIC_TEXT or envelope.type != "DT" or message is None:
                return None
            if type(schema_id) is not str or schema_id in self._refused:
                return None
            if schema_id not in self._tables:
                return None
            reader = self._reader(schema_id)
            change = self._change(
                schema_id,
                message.headers,
                None if message.data == NULL else message.data,
                None if message.beforeData == NULL else message.beforeData,
                reader.whole,
                reader.keyed,
            )
        except (DecodeError, NotSure, BadInput, UnicodeDecodeError):
            return None
        if change is not None:
            self.one_pass.join(schema_id, reader)
        return change

    def _change(
        self,
        schema_id: str,
        headers: Headers,
        data: Any,
        before: Any,
        whole: Callable[[Any], tuple[Any, ...]],
        keyed: Callable[[Any], tuple[Any, ...]],
    ) -> Change | None:
        """The change of a data message of table `schema_id`, its rows (None where absent or
        null) read by `whole` and `keyed`; None where the exact path decides."""
        table = self._tables[schema_id]
        operation = headers.operation
        self._check_mask(schema_id, table, headers.columnMask, operation)
        if operation in UPSERTS:
            if data is None:
                return None
            after = whole(data)
            old = None if before is None else whole(before)
            rows = table.changes(old, after)
        elif operation == "DELETE":
            gone = data if before is None else before
            if gone is None:
                return None
            rows = (table.delete(keyed(gone)),)
        else:
            return None
        return header_change(
            rows,
            operation,
            headers.changeSequence,
            headers.timestamp,
            headers.transactionId,
            headers.transactionEventCounter,
            headers.transactionLastEvent,
        )
