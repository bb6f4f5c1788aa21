"""The shapes of a DataWorks row message, for the fast path (`podd_cdc.json_fast`). Every
field is optional and unchecked here: the decoder checks them as the exact path does. The
structs live for one message and hold only values decoded from JSON (no reference cycle can
form), so the cyclic collector does not track them (`gc=False`). The `schema` stays raw: its
bytes name the mapped table once it has been seen (`KnownSchemas`, bounded in count and
bytes)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from podd_cdc.json_fast import NULL

T = TypeVar("T")


class Stamps(msgspec.Struct, gc=False):
    eventTime: Any = None


class Image(msgspec.Struct, gc=False):
    dataColumn: msgspec.Raw = NULL


class Payload(msgspec.Struct, gc=False):
    op: str | None = None  # another JSON type takes the exact path, which refuses it
    sequenceId: Any = None
    timestamp: Stamps | None = None
    before: Image | None = None
    after: Image | None = None


class Message(msgspec.Struct, gc=False):
    schema: msgspec.Raw = NULL
    payload: Payload | None = None


MESSAGE_READER = msgspec.json.Decoder(Message)


#: Raw schemas kept for the fast path, in bytes at most: a hostile topic may send thousands
#: of schemas of up to 1 MiB that all name one table. Past it, a schema is learnt each time.
MAX_KEPT_SCHEMA_BYTES = 64 << 20
#: Schemas of one length compared byte for byte; more of one length (a hostile topic's)
#: would make every message walk them, so those go by a hash of a copy.
SCHEMAS_BY_LENGTH = 4


class KnownSchemas(Generic[T]):
    """What the fast path learnt of each raw `schema`, each kept once: the first few of a
    length compared byte for byte (the schema is most of a message; copying it to hash it
    cost ten times the comparison), the rest by their bytes."""

    def __init__(self, max_schemas: int, max_bytes: int = MAX_KEPT_SCHEMA_BYTES) -> None:
        self._by_length: dict[int, list[tuple[msgspec.Raw, T]]] = {}
        self._by_bytes: dict[bytes, T] = {}
        self._room = (max_schemas, max_bytes)
        self.kept = self.kept_bytes = 0

    def get(self, raw: msgspec.Raw) -> T | None:
        bucket = self._by_length.get(len(raw))
        if bucket is None:
            return None
        for seen, found in bucket:
            if seen == raw:
                return found
        return self._by_bytes.get(bytes(raw)) if len(bucket) >= SCHEMAS_BY_LENGTH else None

    def add(self, raw: msgspec.Raw, found: T) -> None:
        """Keep `found` for `raw` (a copy of its bytes: a decoded raw value holds on to its
        whole message), while there is room."""
        max_schemas, max_bytes = self._room
        if self.kept >= max_schemas or self.kept_bytes + len(raw) > max_bytes:
            return
        copy = bytes(raw)
        bucket = self._by_length.setdefault(len(raw), [])
        if len(bucket) < SCHEMAS_BY_LENGTH:
            bucket.append((msgspec.Raw(copy), found))
        else:
            self._by_bytes[copy] = found
        self.kept += 1
        self.kept_bytes += len(copy)
