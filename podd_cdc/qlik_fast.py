"""The shapes of a Qlik JSON data message in its envelope, for the fast path
(`podd_cdc.json_fast`). Every field is optional; the headers are typed as Qlik writes them,
and the decoder checks their values as the exact path does; the row is read by the table's
`RowReader`."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from podd_cdc.json_fast import NULL

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
