"""The headers of a Qlik data message (docs/contracts/CDC.md "Qlik Replicate", "Data
message"): the change sequence, the source time, the column mask, and the change they make of
a message's rows. The exact path and the fast path (`podd_cdc.qlik_fast`) both read them here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from podd_cdc.errors import BadInput
from podd_cdc.recent import Recent
from podd_cdc.records import Change, RowChange
from podd_cdc.sequence_guard import sequence_time

UPSERTS = frozenset({"INSERT", "UPDATE", "REFRESH"})
SEQUENCE_WIDTH = 40
#: Qlik's `changeSequence`: 16 digits of time, then a 19-digit change number.
SEQUENCE_DIGITS = 35


def sequence_key(value: Any) -> str:
    """`changeSequence` as a key that sorts as the number it is: as Qlik writes it, 35 digits
    whose first 16 are a time (`YYYYMMDDHHmmSShh`), else bad input. (How far ahead of the
    clock it may be is `podd_cdc.sequence_guard`'s.)"""
    if (
        type(value) is not str
        or len(value) != SEQUENCE_DIGITS
        or not (value.isascii() and value.isdigit())
    ):
        raise BadInput(None, f"changeSequence {str(value)[:50]!r} is not {SEQUENCE_DIGITS} digits")
    prefix = value[:16]
    if prefix not in _GOOD_PREFIXES:
        if sequence_time(value) is None:
            raise BadInput(None, f"changeSequence {value!r} does not begin with a time")
        if len(_GOOD_PREFIXES) >= 4096:
            _GOOD_PREFIXES.clear()
        _GOOD_PREFIXES.add(prefix)
    return value.rjust(SEQUENCE_WIDTH, "0")


_GOOD_PREFIXES: set[str] = set()  # time prefixes checked (a transaction's changes share one)


def source_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if type(value) is str:
        return _text_time(value)
    return _parse_time(value)


def _parse_time(value: Any) -> datetime:
    """A timestamp header as a naive UTC time; any value that is none (out of range, not
    finite, a zone that carries it past year 9999) is bad input."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value / 1000, UTC).replace(tzinfo=None)
        parsed = datetime.fromisoformat(str(value).replace(" ", "T", 1))
        return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed
    except (ValueError, OverflowError, OSError):
        raise BadInput(None, f"timestamp {str(value)[:40]!r} is not a time") from None


_text_time = Recent(_parse_time)  # the changes of one transaction share their timestamp


def column_mask(value: Any) -> int | None:
    """`columnMask` as a number (bit n - 1 for the column of ordinal n)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return int.from_bytes(value, "big")
    if type(value) is str and len(value) <= SHORT_MASK:
        return _short_mask(value)
    return _hex_mask(value)


def _hex_mask(value: Any) -> int:
    try:
        return int(str(value), 16)
    except ValueError:
        raise BadInput(None, f"columnMask {str(value)[:40]!r} is not hexadecimal") from None


#: Masks of up to this many hex digits are kept once read (a task writes a few; a longer one,
#: a message's, is not kept, so what is kept stays small).
SHORT_MASK = 64
_short_mask = Recent(_hex_mask)


def header_change(
    rows: tuple[RowChange, ...],
    operation: Any,
    sequence_value: Any,
    timestamp: Any,
    transaction: Any,
    counter: Any,
    last_event: Any,
) -> Change:
    """The change of a data message, from its rows and headers."""
    if operation == "REFRESH":
        return Change(rows, None, ("",), None)
    sequence = sequence_key(sequence_value)
    if transaction is not None and (
        not isinstance(counter, int) or isinstance(counter, bool) or counter < 1
    ):
        raise BadInput(None, f"transactionEventCounter {str(counter)[:20]!r} is not 1 or more")
    order = (sequence,)  # also the change's identity: one tuple for both
    return Change(
        rows,
        sequence,
        order,
        order,
        source_time(timestamp),
        None if transaction is None else str(transaction),
        counter if transaction is not None else None,
        transaction is None or last_event is True,
    )
