"""Errors of the protocol layer.

`PoddError` is the root of every error this project raises on purpose. Each layer has its
own module of subclasses (`replica_agent.errors`, `replica_store.errors`); this one holds the
root and the errors that carry a PROTOCOL.md error code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from protocol.exit_codes import ExitCode


class ErrorCode(StrEnum):
    """The `errorCode` values of PROTOCOL.md, spelled as on the wire."""

    UNKNOWN_DATAMART = "UNKNOWN_DATAMART"
    OUT_OF_SEQUENCE = "OUT_OF_SEQUENCE"
    DELTA_CONFLICT = "DELTA_CONFLICT"
    BAD_CHUNK = "BAD_CHUNK"
    UNKNOWN_TABLE = "UNKNOWN_TABLE"
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
    INCOMPLETE_DELTA = "INCOMPLETE_DELTA"
    LOAD_FAILED = "LOAD_FAILED"


#: Answers after which an origin must stop: no resend fixes what they say (PROTOCOL.md). The
#: origins stop on them and the harness that certifies origins checks that they do.
STOP_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.DELTA_CONFLICT,
    ErrorCode.BAD_CHUNK,
    ErrorCode.UNKNOWN_TABLE,
    ErrorCode.SCHEMA_MISMATCH,
    ErrorCode.UNKNOWN_DATAMART,
)


class PoddError(Exception):
    """Root of the project's exceptions."""

    #: What a command ends with when this error stops it.
    exit_code: ClassVar[ExitCode] = ExitCode.CANNOT_RUN


class ProtocolError(PoddError):
    """A rejection the replica reports on the wire with `code`."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED
    code: ErrorCode = ErrorCode.BAD_CHUNK
    #: Where a row error was found, when known: (table name, chunk number in its stream).
    chunk: tuple[str, int] | None = None

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"


class BadChunkError(ProtocolError):
    """Inconsistent framing, or a chunk body that cannot be decoded as Avro."""

    code = ErrorCode.BAD_CHUNK


class SchemaMismatchError(ProtocolError):
    """A body's writer schema or rows do not fit the logical table."""

    code = ErrorCode.SCHEMA_MISMATCH


class UnknownTableError(ProtocolError):
    """A `tableName` that is not in the logical schema."""

    code = ErrorCode.UNKNOWN_TABLE


def error_for(code: ErrorCode, message: str) -> ProtocolError:
    """The error that carries `code` (for codes that crossed a process boundary as data)."""
    for error_type in (BadChunkError, SchemaMismatchError, UnknownTableError):
        if error_type.code is code:
            return error_type(message)
    return ProtocolError(message, code=code)


class MessageDecodeError(PoddError):
    """A control message or `delta.in` key that cannot be decoded (it cannot be answered)."""


class SchemaDefinitionError(PoddError):
    """Prostore DDL that cannot be read: names the statement, the position and the expectation."""

    def __init__(
        self, message: str, *, statement: int, line: int, column: int, expected: str | None = None
    ) -> None:
        where = f"statement {statement}, line {line}, column {column}"
        text = f"{where}: {message}" + (f" (expected {expected})" if expected else "")
        super().__init__(text)
        self.statement = statement
        self.line = line
        self.column = column
        self.expected = expected
