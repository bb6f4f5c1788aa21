"""The source's order, checked before a change is fed to the cutter (docs/contracts/CDC.md,
"Sequence integrity"). Pure: time only as the caller passes it.

The cut trusts the source's order: for Qlik, every change at or below the last cut's bound
is taken to be in a delta already, so a change that arrives with such a sequence would be
swallowed as a copy. A sequence that runs ahead of the wall clock moves the bound ahead of
every change still to come; one that goes backwards (a Replicate task reset, a clock change
at the source) or arrives after its interval was cut (delivery skew beyond the settle time)
contradicts the order of arrival. None of these is ever dropped or applied silently: each is
a `SequenceStop`, which stops the run naming topic, partition and offset (a dead-letter
topic would let the next changes be cut past a hole).

* **Ahead of the clock.** A sequence, a source time or a DataWorks `eventTime` more than
  `max_ahead` after the wall clock.
* **At or below the bound, never seen.** A Qlik change at or below the last cut's bound,
  read after that cut (a change read before it was taken), whose identity is neither held
  nor among those the recent cuts took (`remember_taken`; a restarted run seeds it from the
  last cut's offsets).
* **Backwards.** A Qlik change whose sequence is more than `max_regress` older than the
  newest one read in its partition, and whose identity was never seen. A smaller step back
  is a producer's reordering (retries without idempotence), which the cut's order handles.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.errors import SequenceStop
from podd_cdc.records import Change, Heartbeat, Position, Record
from podd_cdc.values import micros, millis_time

#: Identities of changes the recent cuts took, remembered at most.
MAX_TAKEN = 200_000

_PREFIX = slice(-35, -19)  # the 16-digit time of a 35-digit sequence, padded to 40


def sequence_time(key: str) -> datetime | None:
    """The time a Qlik sequence key begins with (`YYYYMMDDHHmmSShh`); None if it holds none."""
    digits = key[_PREFIX]
    try:
        return datetime.strptime(digits[:14], "%Y%m%d%H%M%S").replace(
            microsecond=int(digits[14:16]) * 10_000
        )
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Limits:
    """What follows from the caller's clock `wall`: the time now (naive UTC) and the latest
    time a record may carry, also in microseconds since 1970 and as the largest time prefix
    a Qlik sequence may carry."""

    wall: datetime
    now: datetime
    latest: datetime
    latest_us: int
    latest_prefix: str

    @classmethod
    def at(cls, wall: datetime, max_ahead: timedelta) -> Limits:
        now = wall.astimezone(UTC).replace(tzinfo=None)
        latest = now + max_ahead
        prefix = latest.strftime("%Y%m%d%H%M%S") + "99"
        return cls(wall, now, latest, micros(latest), prefix)


class TakenIdentities(Protocol):
    """The identities one cut took, as the guard asks them."""

    def __contains__(self, identity: Any, /) -> bool: ...

    def __len__(self) -> int: ...


class SequenceGuard:
    def __init__(self, fmt: str, max_ahead: timedelta, max_regress: timedelta) -> None:
        self.fmt = fmt
        self.max_ahead = max_ahead
        self.max_regress = max_regress
        self._taken: deque[TakenIdentities] = deque()
        self._taken_count = 0
        self._limits: Limits | None = None  # those of the caller's last `wall`

    def remember_taken(self, identities: Iterable[Any]) -> None:
        """A cut took changes of these identities: a copy read later is a duplicate."""
        self.remember_cut({i for i in identities if i is not None})

    def remember_cut(self, taken: TakenIdentities) -> None:
        """`remember_taken`, of a cut's identities already gathered (a cutter on arrays
        keeps them as `IdentityRows`); the recent cuts' are kept up to `MAX_TAKEN`."""
        self._taken.append(taken)
        self._taken_count += len(taken)
        while len(self._taken) > 1 and self._taken_count > MAX_TAKEN:
            self._taken_count -= len(self._taken.popleft())

    def taken(self, identity: Any) -> bool:
        return any(identity in batch for batch in reversed(self._taken))

    def check(
        self,
        at: Position,
        record: Record,
        wall: datetime,
        *,
        last: Cut | None,
        newest: Any,
        held: Callable[[Any], bool],
    ) -> None:
        """`SequenceStop` if `record`, read at `at`, breaks the source's order. `newest`:
        the largest key read in its partition so far; `held`: whether a change of that
        identity is held by the cutter."""
        limits = self._limits_at(wall)
        if isinstance(record, Heartbeat):
            self._not_ahead(at, "heartbeat eventTime", _millis(record.event_time_ms), limits)
            return
        if not isinstance(record, Change) or record.cut_key is None:
            return
        change = record
        if change.source_time is not None and change.source_time > limits.latest:
            self._not_ahead(at, "source time", change.source_time, limits)
        if self.fmt != "qlik":
            millis = change.cut_key
            # In microseconds, without a datetime per change; outside it, the exact rule.
            if not (type(millis) is int and 0 <= millis * 1000 <= limits.latest_us):
                self._not_ahead(at, "eventTime", _millis(millis), limits)
            return
        key: str = change.cut_key
        if key[_PREFIX] > limits.latest_prefix:
            when = sequence_time(key)
            self._not_ahead(at, f"changeSequence {key.lstrip('0')}", when or limits.now, limits)
        # Whether the change was seen (held, or taken by a recent cut) is asked only where
        # its sequence would otherwise stop the run: most changes are above every bound.
        bound = None if last is None else last.bound
        if bound is not None and key <= bound and not self._seen(change, held):
            span = last.spans.get(partition_key(at.topic, at.partition)) if last else None
            if span is None or at.offset >= span.end:
                raise SequenceStop(
                    at,
                    f"changeSequence {key.lstrip('0')} is at or below the bound of delta "
                    f"{last.delta if last else '?'} ({bound.lstrip('0')}), but arrived after "
                    "that delta was cut and is no copy of a change it took: a sequence that "
                    "went backwards (a task reset, a clock change at the source) or delivery "
                    "later than --settle-seconds. It is not dropped; the run stops here",
                )
        if newest is not None and key < newest:
            then, now = sequence_time(key), sequence_time(newest)
            if (
                then is not None
                and now is not None
                and then < now - self.max_regress
                and not self._seen(change, held)
            ):
                raise SequenceStop(
                    at,
                    f"changeSequence {key.lstrip('0')} is {now - then} older than "
                    f"{newest.lstrip('0')}, read before it in the same partition: the "
                    "source's sequence went backwards (a task reset, a clock change at the "
                    "source). It is not applied out of order; the run stops here",
                )

    def _limits_at(self, wall: datetime) -> Limits:
        """The limits at `wall`, worked out again only when the caller's clock changes (an
        intake batch passes one `wall` for all its messages)."""
        limits = self._limits
        if limits is None or limits.wall is not wall:
            limits = self._limits = Limits.at(wall, self.max_ahead)
        return limits

    def _seen(self, change: Change, held: Callable[[Any], bool]) -> bool:
        identity = change.identity
        return identity is not None and (held(identity) or self.taken(identity))

    def _not_ahead(self, at: Position, what: str, when: datetime, limits: Limits) -> None:
        if when > limits.latest:
            raise SequenceStop(
                at,
                f"{what} {when.isoformat()} is more than {self.max_ahead} ahead of this "
                f"origin's clock ({limits.now.isoformat()}): a delta dated so would be refused by "
                "the replica, and would move the cut's bound past every change still to come",
            )


def _millis(value: int) -> datetime:
    try:
        return millis_time(value)
    except OverflowError:
        return datetime.max
