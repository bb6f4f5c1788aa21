"""The reference model of PROTOCOL.md's apply semantics, on hand-written cases."""

from __future__ import annotations

from datetime import datetime

import pytest

from protocol.apply_model import (
    DeltaRow,
    ReplicaModel,
    TableCounts,
    Version,
    apply_delta,
    rows_as_of,
)
from protocol.ddl import parse_schema

SCHEMA = parse_schema(
    """
    CREATE TABLE m.t (id bigint not null, v varchar, PRIMARY KEY (id));
    CREATE TABLE m.u (a int not null, b int not null, w int, PRIMARY KEY (a, b));
    """
)
DAY = datetime(2024, 1, 1)


def up(key: int, value: str) -> DeltaRow:
    return DeltaRow((key, value), 0)


def delete(key: int, value: str | None = None) -> DeltaRow:
    return DeltaRow((key, value), 1)


def apply(replica: ReplicaModel, *rows: DeltaRow) -> tuple[ReplicaModel, TableCounts]:
    new, counts = apply_delta(replica, replica.expected_delta_num, DAY, {"t": rows})
    return new, counts[0]


def test_insert_opens_a_version() -> None:
    replica, counts = apply(ReplicaModel(SCHEMA), up(1, "a"))
    assert replica.tables["t"].actual == {(1,): Version((1, "a"), 0, None, 0)}
    assert replica.tables["t"].history == []
    assert counts == TableCounts("t", 1, 1, 0)
    assert replica.applied == [(0, DAY)]


def test_update_closes_the_current_version_and_opens_one() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    replica, counts = apply(replica, up(1, "b"))
    assert replica.tables["t"].actual == {(1,): Version((1, "b"), 1, None, 0)}
    assert replica.tables["t"].history == [Version((1, "a"), 0, 0, 0)]
    assert counts == TableCounts("t", 1, 1, 0)


def test_an_upsert_with_the_same_values_still_makes_a_version() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    replica, counts = apply(replica, up(1, "a"))
    assert replica.tables["t"].actual[(1,)].sys_from == 1
    assert len(replica.tables["t"].history) == 1
    assert counts.rows_upserted == 1


def test_delete_closes_with_sys_op_1() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"), up(2, "b"))
    replica, counts = apply(replica, delete(1))
    assert set(replica.tables["t"].actual) == {(2,)}
    assert replica.tables["t"].history == [Version((1, "a"), 0, 0, 1)]
    assert counts == TableCounts("t", 1, 0, 1)


def test_delete_of_a_missing_key_changes_nothing() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    after, counts = apply(replica, delete(99))
    assert after.tables["t"] == replica.tables["t"]
    assert counts == TableCounts("t", 1, 0, 0)


def test_the_last_row_of_a_key_wins_within_a_delta() -> None:
    replica, counts = apply(ReplicaModel(SCHEMA), up(1, "a"), up(1, "b"), up(1, "c"))
    assert replica.tables["t"].actual == {(1,): Version((1, "c"), 0, None, 0)}
    assert replica.tables["t"].history == []
    assert counts == TableCounts("t", 3, 1, 0)


def test_upsert_then_delete_of_one_key_in_one_delta() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    replica, counts = apply(replica, up(1, "b"), delete(1))
    assert replica.tables["t"].actual == {}
    assert replica.tables["t"].history == [Version((1, "a"), 0, 0, 1)]
    assert counts == TableCounts("t", 2, 0, 1)
    # and for a new key, the delete wins over nothing: nothing happens
    fresh, counts = apply(ReplicaModel(SCHEMA), up(5, "x"), delete(5))
    assert fresh.tables["t"].actual == {}
    assert fresh.tables["t"].history == []
    assert counts == TableCounts("t", 2, 0, 0)


def test_delete_then_upsert_of_one_key_in_one_delta() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    replica, counts = apply(replica, delete(1), up(1, "b"))
    assert replica.tables["t"].actual == {(1,): Version((1, "b"), 1, None, 0)}
    assert replica.tables["t"].history == [Version((1, "a"), 0, 0, 0)]
    assert counts == TableCounts("t", 2, 1, 0)


def test_exact_duplicates_collapse() -> None:
    replica, counts = apply(ReplicaModel(SCHEMA), up(1, "a"), up(1, "a"), up(1, "a"))
    assert len(replica.tables["t"].actual) == 1
    assert counts == TableCounts("t", 3, 1, 0)


def test_an_empty_delta_still_counts_as_applied() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"))
    after, counts = apply(replica)
    assert after.tables == replica.tables
    assert after.applied == [(0, DAY), (1, DAY)]
    assert counts == TableCounts("t", 0, 0, 0)


def test_composite_keys_and_several_tables_in_one_delta() -> None:
    replica, counts = apply_delta(
        ReplicaModel(SCHEMA),
        0,
        DAY,
        {"t": [up(1, "a")], "u": [DeltaRow((1, 1, 10), 0), DeltaRow((1, 2, 20), 0)]},
    )
    assert set(replica.tables["u"].actual) == {(1, 1), (1, 2)}
    assert counts == [TableCounts("t", 1, 1, 0), TableCounts("u", 2, 2, 0)]
    replica, counts = apply_delta(replica, 1, DAY, {"u": [DeltaRow((1, 2, 21), 0)]})
    assert replica.tables["u"].actual[(1, 2)] == Version((1, 2, 21), 1, None, 0)
    assert counts[0] == TableCounts("t", 0, 0, 0)


def test_reading_as_of_every_earlier_delta() -> None:
    replica, _ = apply(ReplicaModel(SCHEMA), up(1, "a"), up(2, "b"))  # delta 0
    replica, _ = apply(replica, up(1, "a2"), delete(2), up(3, "c"))  # delta 1
    replica, _ = apply(replica, delete(1))  # delta 2
    state = replica.tables["t"]
    assert rows_as_of(state, 0) == {(1, "a"), (2, "b")}
    assert rows_as_of(state, 1) == {(1, "a2"), (3, "c")}
    assert rows_as_of(state, 2) == {(3, "c")}


def test_deltas_apply_only_in_order() -> None:
    with pytest.raises(ValueError, match="not the expected 0"):
        apply_delta(ReplicaModel(SCHEMA), 1, DAY, {})
    with pytest.raises(ValueError, match="not in the schema"):
        apply_delta(ReplicaModel(SCHEMA), 0, DAY, {"nope": []})
