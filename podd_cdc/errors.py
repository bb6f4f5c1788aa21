"""Errors of the CDC origin; each names where in the source it was found."""

from __future__ import annotations

from typing import Any, ClassVar

from origin.errors import OriginError
from podd_cdc.records import Position
from protocol.exit_codes import ExitCode


def an_object(obj: Any, what: str) -> dict[str, Any]:
    """`obj` if it is a JSON object (a dict), else BadInput naming `what`."""
    if not isinstance(obj, dict):
        raise BadInput(None, f"{what} is not an object")
    return obj


class CdcError(OriginError):
    """The CDC origin cannot go on (settings, the cut log, the source topic)."""


class BadInput(CdcError):
    """A source message that cannot become a row change (CDC.md "Bad input")."""

    exit_code: ClassVar[ExitCode] = ExitCode.BAD_INPUT

    def __init__(self, at: Position | None, reason: str) -> None:
        where = f"{at}: " if at is not None else ""
        super().__init__(f"bad input at {where}{reason}")
        self.at = at
        self.reason = reason

    def located(self, at: Position) -> BadInput:
        """The same error, placed at `at` (decoders raise it before they know where)."""
        return BadInput(at, self.reason) if self.at is None else self


class SchemaStop(BadInput):
    """A replicated table's columns changed at the source (CDC.md "Schema")."""

    def located(self, at: Position) -> SchemaStop:
        return SchemaStop(at, self.reason) if self.at is None else self


class SequenceStop(BadInput):
    """A change that breaks the source's order (CDC.md "Sequence integrity"): always a stop,
    never a dead letter, since the changes after it would be cut past a hole."""

    def located(self, at: Position) -> SequenceStop:
        return SequenceStop(at, self.reason) if self.at is None else self


class AwaitingMetadata(CdcError):
    """A Qlik data message names a table whose metadata message has not been read yet."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no metadata message yet for {key}")
        self.key = key


class TableRefused(BadInput):
    """A source table the replica cannot hold (no usable key, a name that is no identifier)."""
