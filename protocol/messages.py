"""The protocol's messages as frozen pydantic models (PROTOCOL.md).

Python names are snake_case; the wire names (camelCase, as in the `.avsc` files) are their
aliases. Timestamps are timezone-aware UTC datetimes; naive ones are taken as UTC, since
`timestamp-micros` carries no zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Long = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UtcTimestamp = Annotated[datetime, AfterValidator(_as_utc)]


def from_micros(micros: int) -> datetime:
    """Microseconds since the epoch as a UTC datetime (ValueError beyond year 9999)."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


def _micros_or_datetime(value: Any) -> Any:
    """A `timestamp-micros` read as a plain long (its logical type on the field, not the
    type, as Prostore's backup writer puts it) is still microseconds since the epoch."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return from_micros(value)
        except OverflowError:
            raise ValueError(f"{value} microseconds is not a timestamp") from None
    return value


#: A timestamp that also accepts a plain long of microseconds: what a reader of the
#: contract's schema makes of a long written without its logical type (BACKUP.md's keys;
#: any protocol message written so).
MicrosTimestamp = Annotated[datetime, BeforeValidator(_micros_or_datetime), AfterValidator(_as_utc)]


def to_micros(value: datetime) -> int:
    """A timestamp as microseconds since the epoch (what travels on the wire)."""
    delta = _as_utc(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class WireModel(BaseModel):
    """A record of one of the shipped Avro schemas."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
    )
    avro_name: ClassVar[str]

    def to_avro_record(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    @classmethod
    def from_avro_record(cls, record: dict[str, Any]) -> Self:
        return cls.model_validate(record)


class DeltaInKey(WireModel):
    """The key of a `delta.in` message: which transfer, delta, stream and chunk."""

    avro_name: ClassVar[str] = "DeltaInKey"

    request_id: str
    datamart: str
    delta_num: Long
    delta_date: MicrosTimestamp
    subscription: str
    table_name: str
    stream_number: Long
    stream_total: Long
    chunk_number: Long
    is_last_chunk: bool


class DeltaStatus(StrEnum):
    OK = "OK"
    ERROR = "ERROR"


class TableResult(WireModel):
    avro_name: ClassVar[str] = "TableResult"

    table_name: str
    rows_received: Long
    rows_upserted: Long
    rows_deleted: Long


class DeltaInResult(WireModel):
    """The outcome of one transfer, on `delta.in.rs`."""

    avro_name: ClassVar[str] = "DeltaInResult"

    request_id: str
    datamart: str
    delta_num: Long
    delta_date: MicrosTimestamp
    status: DeltaStatus
    error_code: str | None = None
    error_message: str | None = None
    tables: tuple[TableResult, ...] = ()
    applied_at: MicrosTimestamp | None = None


class DeltaRequest(WireModel):
    """`delta.rq`: the origin asks for the replica's state."""

    avro_name: ClassVar[str] = "DeltaRequest"

    request_id: str
    datamart: str
    sent_at: MicrosTimestamp


class ReplicaState(StrEnum):
    IDLE = "IDLE"
    RECEIVING = "RECEIVING"
    LOADING = "LOADING"
    FAILED = "FAILED"


class TransferProgress(WireModel):
    avro_name: ClassVar[str] = "TransferProgress"

    request_id: str
    delta_num: Long
    stream_total: Long
    streams_complete: Long
    chunks_received: Long
    missing: tuple[str, ...] = ()


class DeltaState(WireModel):
    """`delta.rs`: the replica's state, answering one `delta.rq`."""

    avro_name: ClassVar[str] = "DeltaState"

    request_id: str
    datamart: str
    state: ReplicaState
    delta_ok_num: Long | None = None
    delta_ok_date: MicrosTimestamp | None = None
    expected_delta_num: Long
    in_progress: tuple[TransferProgress, ...] = ()
    error_code: str | None = None
    error_message: str | None = None


CONTROL_MESSAGES: tuple[type[WireModel], ...] = (DeltaInResult, DeltaRequest, DeltaState)
