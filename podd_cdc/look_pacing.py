"""When a cutter looks for a due delta, and whether what a look found is due: one set of
rules for the cutter on records (`podd_cdc.cutter`) and the one on arrays. Pure: time only
as the caller passes it.

A look walks every transaction held, and the runner asks every 50 ms, or after every batch
read. So a look is skipped while it cannot find more than the last one did:
- nothing held is old enough, nor enough of it, and no partition is quiet (cheap);
- the last look found nothing, and nothing was fed and no partition settled since;
- the last look found a delta not yet due, and little was fed (`RELOOK_RECORDS`, at most a
  tenth of `max_rows`), no partition settled, and little time passed (`RELOOK_SECONDS`,
  at most a quarter of `max_age`) since.
A delta found is due by size (`max_rows`), by age (its oldest change waited `max_age`,
where the caller allows a cut by age), when every partition is quiet, or when forced.
"""

from __future__ import annotations

from collections.abc import Callable

#: A look that found a delta not yet due is not repeated until this many records were fed
#: (at most a tenth of `max_rows`) or this many seconds passed (or a partition settled).
RELOOK_RECORDS = 5_000
RELOOK_SECONDS = 1.0


class LookPacing:
    def __init__(self, max_rows: int, max_age: float) -> None:
        self.max_rows = max_rows
        self.max_age = max_age
        self._fruitless: tuple[int, frozenset[str]] | None = None  # the last empty look
        #: The last look that found a delta not yet due: records fed, quiet, when, by age.
        self._not_due: tuple[int, frozenset[str], float, bool] | None = None

    def worth_looking(
        self,
        fed: int,
        quiet: frozenset[str],
        now: float,
        oldest: Callable[[], float],
        *,
        urgent: bool,
        force: bool,
        by_age: bool,
    ) -> bool:
        """Whether to look, `fed` records fed so far, partitions `quiet` read to their end,
        the oldest change held arrived at `oldest()` (asked only for a look by age that is
        neither urgent nor forced); `urgent`: a delta's worth is held or every partition is
        quiet."""
        if not (force or urgent) and (not by_age or oldest() > now - self.max_age):
            return False  # nothing held is old enough, nor enough of it
        if (fed, quiet) == self._fruitless:
            return False  # nothing read and no partition settled since the last empty look
        last = self._not_due
        return force or last is None or not self._too_soon(last, fed, quiet, now, by_age)

    def _too_soon(
        self,
        last: tuple[int, frozenset[str], float, bool],
        fed: int,
        quiet: frozenset[str],
        now: float,
        by_age: bool,
    ) -> bool:
        """Whether a look now would repeat `last`, which found a delta not yet due."""
        was_fed, settled, at, aged = last
        return (
            (aged or not by_age)  # a look ahead does not stand for one by age
            and settled == quiet
            and fed - was_fed < max(1, min(RELOOK_RECORDS, self.max_rows // 10))
            and now - at < min(RELOOK_SECONDS, self.max_age / 4)
        )

    def due(
        self,
        fed: int,
        quiet: frozenset[str],
        now: float,
        count: int,
        oldest: float,
        *,
        all_quiet: bool,
        force: bool,
        by_age: bool,
    ) -> bool:
        """Whether the `count` changes a look found, the first of which arrived at `oldest`,
        are a due delta; remembers a look that found none, or one not yet due."""
        if not count:
            self._fruitless = (fed, quiet)
            return False
        due = (
            force
            or count >= self.max_rows
            or (by_age and oldest <= now - self.max_age)
            or all_quiet
        )
        self._not_due = None if due else (fed, quiet, now, by_age)
        return due
