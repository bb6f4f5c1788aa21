"""The shapes of a DataWorks row message, for the fast path (`podd_cdc.json_fast`). Every
field is optional and unchecked here: the decoder checks them as the exact path does. The
`schema` stays raw: its bytes name the mapped table once it has been seen."""

from __future__ import annotations

from typing import Any

import msgspec

from podd_cdc.json_fast import NULL


class Stamps(msgspec.Struct):
    eventTime: Any = None


class Image(msgspec.Struct):
    dataColumn: msgspec.Raw = NULL


class Payload(msgspec.Struct):
    op: Any = None
    sequenceId: Any = None
    timestamp: Stamps | None = None
    before: Image | None = None
    after: Image | None = None


class Message(msgspec.Struct):
    schema: msgspec.Raw = NULL
    payload: Payload | None = None


MESSAGE_READER = msgspec.json.Decoder(Message)
