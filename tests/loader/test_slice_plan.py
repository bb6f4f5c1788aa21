"""The staging plan (pure): slices bound by size, cut further for idle cores, packed into
at most one task per core, every chunk of a table in every one of its slices."""

from __future__ import annotations

import pyarrow as pa

from spark_loader.slice_encode import last_per_key
from spark_loader.slice_jobs import MIN_SPLIT_BYTES, plan_tasks
from spark_loader.staging_steps import table_groups

MIB = 2**20


def chunks(sizes: dict[int, list[int]]) -> list[tuple[int, int, str, int]]:
    return [
        (table, number, f"/s/{table}-{number}", size)
        for table, table_sizes in sizes.items()
        for number, size in enumerate(table_sizes, start=1)
    ]


def slices_of(tasks: list, table: int) -> list:  # type: ignore[type-arg]
    return [s for task in tasks for s in task.slices if s.table == table]


def test_small_tables_are_packed_into_one_task_per_core() -> None:
    tasks = plan_tasks(chunks({t: [1000] for t in range(10)}), parallelism=2, max_slice_bytes=MIB)
    assert len(tasks) == 2
    assert sorted(s.table for task in tasks for s in task.slices) == list(range(10))
    assert all(s.slices == 1 for task in tasks for s in task.slices)


def test_a_table_larger_than_a_slice_is_cut_by_key_hash() -> None:
    sizes = {0: [MIB] * 10, 1: [1000]}
    tasks = plan_tasks(chunks(sizes), parallelism=2, max_slice_bytes=4 * MIB)
    big = slices_of(tasks, 0)
    assert sorted(s.slice for s in big) == [0, 1, 2]
    assert {s.slices for s in big} == {3}
    # every slice reads every chunk of its table, in chunk order
    assert all([n for n, _ in s.chunks] == list(range(1, 11)) for s in big)
    assert len(slices_of(tasks, 1)) == 1


def test_idle_cores_get_a_share_of_the_largest_table() -> None:
    tasks = plan_tasks(chunks({0: [3 * MIN_SPLIT_BYTES]}), parallelism=2, max_slice_bytes=10**12)
    assert len(tasks) == 2
    assert {s.slices for s in slices_of(tasks, 0)} == {2}


def test_tables_below_the_split_size_are_not_cut_for_parallelism() -> None:
    tasks = plan_tasks(chunks({0: [1000, 1000]}), parallelism=8, max_slice_bytes=10**12)
    assert len(tasks) == 1
    assert tasks[0].slices[0].slices == 1


def test_chunks_arriving_out_of_order_are_read_in_chunk_order() -> None:
    entries = [(0, 3, "/c3", 10), (0, 1, "/c1", 10), (0, 2, "/c2", 10)]
    (task,) = plan_tasks(entries, parallelism=1, max_slice_bytes=MIB)
    assert [p for _, p in task.slices[0].chunks] == ["/c1", "/c2", "/c3"]


def test_tables_are_grouped_into_consecutive_jobs_of_about_equal_bytes() -> None:
    assert table_groups([10] * 10, 3) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert table_groups([10] * 10, 1) == [0] * 10
    assert table_groups([5, 5, 5], 8) == [0, 2, 5]  # one job per table at most
    assert table_groups([0, 0, 0], 3) == [0, 0, 0]
    big_first = table_groups([100, 1, 1], 3)
    assert big_first[0] == 0
    assert big_first[1] == big_first[2]


def test_job_groups_never_go_back_and_never_exceed_the_jobs_asked() -> None:
    for sizes in ([3, 1, 4, 1, 5, 9, 2, 6], [1] * 7, [0, 8, 0, 8]):
        for jobs in range(1, 10):
            groups = table_groups(sizes, jobs)
            assert groups == sorted(groups)
            assert len(set(groups)) <= jobs


def test_the_last_row_per_key_is_kept_and_staged_in_key_order() -> None:
    """`last_per_key`: duplicates resolve to the last arrival; the kept rows come out in the
    keys' byte order (for the apply's index inserts), whatever order they arrived in."""
    keys = [pa.array([b"\x00\x05", b"\x00\x01", b"\x00\x05"]), pa.array([b"\x00\x03", b"\x00\x01"])]
    rows = [pa.array([b"5-first", b"1-first", b"5-last"]), pa.array([b"3", b"1-last"])]
    kept = pa.chunked_array(last_per_key(keys, rows), pa.binary()).to_pylist()
    assert kept == [b"1-last", b"3", b"5-last"]
    assert last_per_key([], []) == []
