"""The shapes of a Qlik JSON data message in its envelope, for the fast path
(`podd_cdc.json_fast`). Every field is optional and unchecked here: the decoder checks them
as the exact path does; the row is read by the table's `RowReader`."""

from __future__ import annotations

from typing import Any

import msgspec

from podd_cdc.json_fast import NULL


class Headers(msgspec.Struct):
    operation: Any = None
    changeSequence: Any = None
    timestamp: Any = None
    transactionId: Any = None
    transactionEventCounter: Any = None
    transactionLastEvent: Any = None
    columnMask: Any = None


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
