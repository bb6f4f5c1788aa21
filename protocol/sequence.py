"""The order deltas are applied in (PROTOCOL.md): the one definition of the sequence rules.

Deltas load strictly in order 0, 1, 2, …; the replica expects the delta after the last one
it applied. A delta that was applied before is answered with its stored result if its date
is the same, and is a `DELTA_CONFLICT` if not; a new delta must be the expected one
(`OUT_OF_SEQUENCE` otherwise) and dated later than the last applied one (`DELTA_CONFLICT`).

The agent's tracker (before a chunk is staged, and again when a transfer completes) and the
loader (under the datamart's lock) both ask `check_sequence`, with what each knows of the
registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from protocol.errors import ErrorCode, ProtocolError


@dataclass(frozen=True)
class AppliedDelta:
    """A delta the replica applied: its number and the origin's date."""

    delta_num: int
    delta_date: datetime


def expected_next(last: AppliedDelta | int | None) -> int:
    """The delta a replica expects after `last` (0 for an empty replica)."""
    if last is None:
        return 0
    number = last.delta_num if isinstance(last, AppliedDelta) else last
    return number + 1


@dataclass(frozen=True)
class SequenceRefusal:
    """Why a delta cannot be applied now, with its PROTOCOL.md code."""

    code: ErrorCode
    message: str

    def error(self) -> ProtocolError:
        return ProtocolError(self.message, code=self.code)


def check_sequence(
    delta_num: int,
    delta_date: datetime,
    *,
    applied_date: datetime | None,
    last: AppliedDelta | None,
) -> SequenceRefusal | None:
    """The sequence rule delta `delta_num` breaks now, or None.

    `applied_date` is the date the registry holds for `delta_num` (None: not applied);
    `last` is the last applied delta. None with `applied_date` set means "already applied,
    same date": answer the stored result, apply nothing.
    """
    if applied_date is not None:
        if applied_date != delta_date:
            return SequenceRefusal(
                ErrorCode.DELTA_CONFLICT,
                f"delta {delta_num} was applied with date {applied_date.isoformat()}, "
                f"not {delta_date.isoformat()}",
            )
        return None
    expected = expected_next(last)
    if delta_num != expected:
        # Every delta below `expected` is in the registry, so only "greater" is left.
        return SequenceRefusal(
            ErrorCode.OUT_OF_SEQUENCE, f"delta {delta_num} arrived, the replica expects {expected}"
        )
    if last is not None and delta_date <= last.delta_date:
        return SequenceRefusal(
            ErrorCode.DELTA_CONFLICT,
            f"delta {delta_num} is dated {delta_date.isoformat()}, not later than "
            f"delta {last.delta_num} ({last.delta_date.isoformat()})",
        )
    return None
