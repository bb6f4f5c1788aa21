"""`podd_cdc.look_pacing`: when a cutter looks for a due delta, and what is due."""

from __future__ import annotations

from podd_cdc.look_pacing import RELOOK_RECORDS, RELOOK_SECONDS, LookPacing

QUIET = frozenset({"q:0"})
NONE_QUIET: frozenset[str] = frozenset()


def _pacing(max_rows: int = 100_000, max_age: float = 10.0) -> LookPacing:
    return LookPacing(max_rows, max_age)


def _worth(pacing: LookPacing, fed: int, now: float, **given: object) -> bool:
    options: dict[str, object] = {"urgent": False, "force": False, "by_age": True}
    options.update(given)
    quiet = options.pop("quiet", NONE_QUIET)
    oldest = options.pop("oldest", 0.0)
    return pacing.worth_looking(fed, quiet, now, lambda: oldest, **options)  # type: ignore[arg-type,return-value]


def _not_due_look(pacing: LookPacing, fed: int, now: float, by_age: bool = True) -> None:
    """A look that found a few changes, not yet a delta."""
    assert not pacing.due(fed, NONE_QUIET, now, 3, now, all_quiet=False, force=False, by_age=by_age)


def test_nothing_old_enough_nor_enough_is_not_looked_at() -> None:
    pacing = _pacing(max_age=10.0)
    assert not _worth(pacing, 1, now=5.0, oldest=0.0)  # waited 5 s of 10
    assert _worth(pacing, 1, now=10.0, oldest=0.0)  # waited 10 s
    assert not _worth(pacing, 1, now=50.0, oldest=0.0, by_age=False)  # only a full delta
    assert _worth(pacing, 1, now=5.0, urgent=True)
    assert _worth(pacing, 1, now=5.0, force=True)


def test_an_empty_look_is_not_repeated_until_something_is_read_or_settles() -> None:
    pacing = _pacing()
    assert not pacing.due(7, NONE_QUIET, 0.0, 0, 0.0, all_quiet=False, force=True, by_age=True)
    assert not _worth(pacing, 7, now=99.0, force=True)
    assert _worth(pacing, 8, now=99.0, force=True)
    assert _worth(pacing, 7, now=99.0, quiet=QUIET, force=True)


def test_a_look_not_yet_due_is_repeated_after_enough_records_time_or_a_settled_partition() -> None:
    pacing = _pacing(max_rows=100_000, max_age=10.0)
    _not_due_look(pacing, 100, now=20.0)
    assert not _worth(pacing, 100 + RELOOK_RECORDS - 1, now=20.0, urgent=True)
    assert _worth(pacing, 100 + RELOOK_RECORDS, now=20.0, urgent=True)
    assert _worth(pacing, 101, now=20.0 + RELOOK_SECONDS, urgent=True)
    assert _worth(pacing, 101, now=20.0, quiet=QUIET, urgent=True)
    assert _worth(pacing, 101, now=20.0, force=True)


def test_the_bounds_shorten_the_wait_for_small_deltas() -> None:
    """A tenth of `max_rows` records, a quarter of `max_age` seconds."""
    pacing = _pacing(max_rows=50, max_age=2.0)
    _not_due_look(pacing, 0, now=0.0)
    assert not _worth(pacing, 4, now=0.4, urgent=True)
    assert _worth(pacing, 5, now=0.4, urgent=True)
    assert _worth(pacing, 4, now=0.5, urgent=True)


def test_a_look_ahead_does_not_stand_for_one_by_age() -> None:
    pacing = _pacing()
    _not_due_look(pacing, 100, now=20.0, by_age=False)
    assert _worth(pacing, 100, now=20.0, urgent=True, by_age=True)
    assert not _worth(pacing, 100, now=20.0, urgent=True, by_age=False)


def test_what_is_due() -> None:
    pacing = _pacing(max_rows=10, max_age=5.0)

    def due(count: int, oldest: float, **given: bool) -> bool:
        options = {"all_quiet": False, "force": False, "by_age": True} | given
        return pacing.due(0, NONE_QUIET, 10.0, count, oldest, **options)

    assert due(10, 9.0)  # size
    assert not due(9, 9.0)
    assert due(9, 5.0)  # age
    assert not due(9, 5.0, by_age=False)
    assert due(1, 9.0, all_quiet=True)
    assert due(1, 9.0, force=True)
    assert not due(0, 0.0, force=True)  # nothing found is never due
