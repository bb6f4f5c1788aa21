"""What the agent keeps in memory of one datamart's applied deltas: a bounded window.

Deltas load strictly in order, so the registry holds every delta from the first one up to
the last; the agent needs the last one (the sequence, `delta.rs`) and the dates of recent ones
(a resend of an applied delta is answered with its stored result only if its date is the
same). It keeps the dates of the last `capacity` deltas and nothing of older ones: a delta
below the window is known to be applied, and its date is compared with the registry's when
its transfer is answered (`LoadWorker`). Memory and the cost of a registry read so stay the
same after ten deltas or ten million.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from protocol.sequence import AppliedDelta

#: Dates of this many recent deltas are kept per datamart (and read from the registry).
WINDOW = 1_000


class AppliedWindow:
    """The last applied deltas of one datamart, with their dates; see the module."""

    def __init__(
        self,
        dates: Mapping[int, datetime] | Iterable[AppliedDelta] = (),
        *,
        capacity: int = WINDOW,
    ) -> None:
        if capacity < 1:
            raise ValueError("the window holds one delta at least")
        self.capacity = capacity
        pairs = (
            dates.items()
            if isinstance(dates, Mapping)
            else ((d.delta_num, d.delta_date) for d in dates)
        )
        kept = sorted(pairs)[-capacity:]
        self._dates: dict[int, datetime] = dict(kept)

    @property
    def last(self) -> AppliedDelta | None:
        if not self._dates:
            return None
        number = next(reversed(self._dates))
        return AppliedDelta(number, self._dates[number])

    def record(self, delta_num: int, delta_date: datetime) -> None:
        """Delta `delta_num` was applied (the next one: deltas load in order)."""
        self._dates[delta_num] = delta_date
        if len(self._dates) > 1 and delta_num < next(reversed(self._dates)):
            self._dates = dict(sorted(self._dates.items()))
        while len(self._dates) > self.capacity:
            del self._dates[next(iter(self._dates))]

    def holds(self, delta_num: int) -> bool:
        """Whether delta `delta_num` is applied (every delta up to the last one is)."""
        last = self.last
        return last is not None and 0 <= delta_num <= last.delta_num

    def date_of(self, delta_num: int) -> datetime | None:
        """The date delta `delta_num` was applied with, if the window keeps it."""
        return self._dates.get(delta_num)

    def same_as(self, other: AppliedWindow) -> bool:
        return self._dates == other._dates

    def __len__(self) -> int:
        return len(self._dates)

    def __repr__(self) -> str:
        return f"AppliedWindow(last={self.last}, kept={len(self._dates)})"
